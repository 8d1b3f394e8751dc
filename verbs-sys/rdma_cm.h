/* The librdmacm headers (Debian: librdmacm-dev) that verbs-sys binds in its rdma_cm module. */
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
