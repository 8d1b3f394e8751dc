//! Log file names: `<host>-<pid>-r<rank>-<n>.sigmalog` (`norank` when no launcher variable
//! names a rank). `<n>` counts up from 0 when the name is taken (the same pid after `exec`),
//! so thousands of ranks of many hosts can share one directory.

/// File name extension of SigmaTrace logs.
pub const EXTENSION: &str = "sigmalog";

/// The name of candidate `n` for this process.
pub fn log_name(host: &str, pid: u32, rank: Option<u32>, n: u32) -> String {
    let host = sanitize(host);
    match rank {
        Some(r) => format!("{host}-{pid}-r{r}-{n}.{EXTENSION}"),
        None => format!("{host}-{pid}-norank-{n}.{EXTENSION}"),
    }
}

/// Keeps `[A-Za-z0-9._-]`, maps anything else to `_`, never empty, at most 64 bytes.
pub fn sanitize(host: &str) -> String {
    let s: String = host
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("host{s}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_host_pid_rank_and_sequence() {
        assert_eq!(
            log_name("node07", 4242, Some(3), 0),
            "node07-4242-r3-0.sigmalog"
        );
        assert_eq!(
            log_name("node07", 4242, None, 2),
            "node07-4242-norank-2.sigmalog"
        );
    }

    #[test]
    fn hostile_hostnames_cannot_escape_the_directory() {
        assert_eq!(sanitize("../etc/x"), "host.._etc_x");
        assert_eq!(sanitize(""), "host");
        assert_eq!(sanitize("a b/c\n"), "a_b_c_");
        assert_eq!(sanitize(&"x".repeat(200)).len(), 64);
        assert!(!log_name("a/b", 1, None, 0).contains('/'));
    }
}
