/* The headers of the installed rdma-core (Debian: libibverbs-dev) that verbs-sys binds. */
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
