//! bindgen over the installed rdma-core headers, so every layout is the one the system's
//! libibverbs, libmlx5 and librdmacm use:
//!
//! - `bindings.rs` from `wrapper.h` (`<infiniband/verbs.h>`, `<infiniband/mlx5dv.h>`, from
//!   libibverbs-dev): the crate root.
//! - `rdma_cm.rs` from `rdma_cm.h` (`<rdma/rdma_cma.h>`, `<rdma/rdma_verbs.h>`, from
//!   librdmacm-dev): the `rdma_cm` module. Everything the root already defines is left out
//!   of it (the module glob-imports the root), so an `ibv_*` type is one type in both.
//!
//! The allowlists are the union of what the workspace uses: every `ibv_*` / `verbs_*` type,
//! constant and function; every `mlx5dv_*` type and `MLX5*` constant (softnic implements
//! libmlx5's side of them); `_compat_ibv_port_attr`; the `mlx5dv_init_obj` and `mlx5dv_devx_*` functions; the `rdma_*`
//! types and `RDMA_*` / `RAI_*` constants. No link directive: the interposer must not link
//! libibverbs (it finds the real functions with `dlsym`), and softnic *is* libibverbs, so
//! users that call functions link the libraries themselves.
//!
//! Not bound: the `mlx5_wqe_*` / `mlx5_cqe64` structs. Nothing here reads them (the WQE and
//! CQE formats are the `mlx5` codec crate's), and bindgen lays out their
//! `packed, aligned(4)` form wrongly (`mlx5_wqe_ctrl_seg`: 20 bytes against C's 16).

use std::path::Path;

fn main() {
    let manifest = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest"));
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let verbs = verbs_bindings(&manifest.join("wrapper.h"));
    std::fs::write(out.join("bindings.rs"), &verbs).expect("write bindings.rs");
    let cm = rdma_cm_bindings(&manifest.join("rdma_cm.h"), &defined_names(&verbs));
    std::fs::write(out.join("rdma_cm.rs"), cm).expect("write rdma_cm.rs");
}

/// The options both generations share: C enums as integer constants without an enum-name
/// prefix, `Default` but not `Debug`, no layout tests (`tests/abi.rs` checks layouts).
fn builder(header: &Path) -> bindgen::Builder {
    println!("cargo:rerun-if-changed={}", header.display());
    bindgen::Builder::default()
        .header(header.display().to_string())
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
}

fn verbs_bindings(header: &Path) -> String {
    builder(header)
        .allowlist_type("ibv_.*|_ibv_.*|verbs_.*|_compat_ibv_port_attr")
        .allowlist_type("mlx5dv_.*")
        .allowlist_var("IBV_.*|ibv_.*|MLX5.*")
        .allowlist_function("ibv_.*|mlx5dv_init_obj|mlx5dv_devx_.*")
        .generate()
        .expect("bindgen on <infiniband/verbs.h> and <infiniband/mlx5dv.h> (install libibverbs-dev and libclang-dev: scripts/install-deps.sh)")
        .to_string()
}

fn rdma_cm_bindings(header: &Path, in_root: &[String]) -> String {
    let mut b = builder(header)
        .allowlist_type("rdma_.*")
        .allowlist_var("RDMA_.*|RAI_.*")
        .raw_line("pub use super::*;")
        .parse_callbacks(Box::new(RootTypes));
    for name in in_root {
        b = b.blocklist_item(format!("^{name}$"));
    }
    b.generate()
        .expect("bindgen on <rdma/rdma_cma.h> (install librdmacm-dev: scripts/install-deps.sh)")
        .to_string()
}

/// The root's types, left out of `rdma_cm`, are `Copy` and `Default` (every generated type
/// is); telling bindgen so keeps the unions that hold them (`rdma_cm_event.param`) plain
/// Rust unions, as a single generation would make them.
#[derive(Debug)]
struct RootTypes;

impl bindgen::callbacks::ParseCallbacks for RootTypes {
    fn blocklisted_type_implements_trait(
        &self,
        _name: &str,
        derive: bindgen::callbacks::DeriveTrait,
    ) -> Option<bindgen::callbacks::ImplementsTrait> {
        use bindgen::callbacks::{DeriveTrait, ImplementsTrait};
        matches!(derive, DeriveTrait::Copy | DeriveTrait::Default).then_some(ImplementsTrait::Yes)
    }
}

/// The items a generation defines: top-level `pub struct|union|type|const|static NAME` and the
/// `pub fn NAME` of its `extern "C"` blocks, less bindgen's own helpers and anonymous-enum
/// types, which each generation numbers for itself.
fn defined_names(bindings: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_extern = false;
    for line in bindings.lines() {
        if line.starts_with("unsafe extern \"C\" {") || line.starts_with("extern \"C\" {") {
            in_extern = true;
            continue;
        }
        if line == "}" {
            in_extern = false;
            continue;
        }
        let item = match line.strip_prefix("pub ") {
            Some(top) => top,
            None if in_extern => match line.trim_start().strip_prefix("pub ") {
                Some(f) => f,
                None => continue,
            },
            None => continue,
        };
        let Some((kind, rest)) = item.split_once(' ') else {
            continue;
        };
        if !matches!(
            kind,
            "struct" | "union" | "type" | "const" | "static" | "fn"
        ) {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let helper = name.starts_with("__Bindgen")
            || name.starts_with("_bindgen_ty_")
            || name == "__IncompleteArrayField";
        if !name.is_empty() && !helper {
            names.push(name);
        }
    }
    names.sort();
    names.dedup();
    names
}
