/* The two variadic provider-interface entry points (Rust cannot define C variadics on
 * stable). Both delegate to softnic's Rust code. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

extern int sv_ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
extern const char *sv_ibv_get_sysfs_path(void);

/* __verbs_log: printed to stderr when VERBS_LOG_LEVEL is at least `level`. */
void sv_verbs_log(void *ctx, uint32_t level, const char *fmt, ...)
{
	const char *env = getenv("VERBS_LOG_LEVEL");
	va_list ap;

	(void)ctx;
	if (!env || strtoul(env, NULL, 0) < level)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* ibv_read_ibdev_sysfs_file: <sysfs>/class/infiniband/<sysfs_name>/<fnfmt...>; bytes read
 * (trailing newline removed) or -1 with errno. */
int sv_ibv_read_ibdev_sysfs_file(char *buf, size_t size, const char *sysfs_name,
				 const char *fnfmt, ...)
{
	char dir[512], file[512];
	va_list ap;

	snprintf(dir, sizeof(dir), "%s/class/infiniband/%s", sv_ibv_get_sysfs_path(), sysfs_name);
	va_start(ap, fnfmt);
	vsnprintf(file, sizeof(file), fnfmt, ap);
	va_end(ap);
	return sv_ibv_read_sysfs_file(dir, file, buf, size);
}
