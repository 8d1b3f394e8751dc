//! softnic's `libmlx5.so.1`: only versioned entry points (MLX5_1.x) that jump to the
//! `sv_mlx5dv_*` implementations exported by softnic's `libibverbs.so.1`, so all device state
//! stays in one library.

std::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/mlx5.s")));
