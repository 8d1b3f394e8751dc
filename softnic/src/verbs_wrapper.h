#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
