//! Which shard this process is: the launcher's environment (Open MPI, PMI, Slurm), read once
//! by the command line. No MPI library is linked or called.

#![forbid(unsafe_code)]

use crate::error::ConvertError;

/// Set to `0` to convert in one process even under a launcher.
pub const DISABLE_ENV: &str = "SIGMATRACE_SHARD";

/// This process's place among the launched converters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub rank: usize,
    pub size: usize,
    /// Names this launch (job and step ids), so that two conversions into one output
    /// directory do not read each other's files.
    pub key: String,
    /// Which variables said so ("OMPI_COMM_WORLD_SIZE", ...).
    pub source: &'static str,
}

impl Launch {
    /// From the process environment; `None` when not launched as more than one process.
    pub fn from_env() -> Result<Option<Launch>, ConvertError> {
        Launch::from_lookup(|k| std::env::var(k).ok())
    }

    /// From any environment lookup (tests).
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Launch>, ConvertError> {
        if get(DISABLE_ENV).is_some_and(|v| v == "0") {
            return Ok(None);
        }
        // Slurm: SLURM_NTASKS is also set in a batch script outside any `srun` step (where
        // SLURM_PROCID is 0 for the one script): only a step's variables count.
        let slurm_size = get("SLURM_STEP_NUM_TASKS")
            .or_else(|| get("SLURM_STEP_ID").and_then(|_| get("SLURM_NTASKS")));
        let sources: [(&'static str, Option<String>, Option<String>); 3] = [
            (
                "OMPI_COMM_WORLD_SIZE",
                get("OMPI_COMM_WORLD_SIZE"),
                get("OMPI_COMM_WORLD_RANK"),
            ),
            ("PMI_SIZE", get("PMI_SIZE"), get("PMI_RANK")),
            ("SLURM_NTASKS", slurm_size, get("SLURM_PROCID")),
        ];
        for (source, size, rank) in sources {
            let Some(size) = size else { continue };
            let bad = |what: &str, v: &str| {
                ConvertError::Options(format!("launcher variable {what}={v:?} is not a number"))
            };
            let size: usize = size.trim().parse().map_err(|_| bad(source, &size))?;
            if size <= 1 {
                return Ok(None);
            }
            let rank = rank.ok_or_else(|| {
                ConvertError::Options(format!(
                    "{source}={size} is set but not this process's rank"
                ))
            })?;
            let rank: usize = rank.trim().parse().map_err(|_| bad("rank", &rank))?;
            if rank >= size {
                return Err(ConvertError::Options(format!(
                    "launcher rank {rank} is not below the size {size} ({source})"
                )));
            }
            let job = match (get("SLURM_JOB_ID"), get("SLURM_STEP_ID")) {
                (Some(j), Some(s)) if source == "SLURM_NTASKS" => Some(format!("{j}.{s}")),
                _ => None,
            }
            .or_else(|| get("PMIX_NAMESPACE"))
            .or_else(|| get("OMPI_MCA_ess_base_jobid"))
            .or_else(|| get("OMPI_MCA_orte_ess_jobid"))
            .or_else(|| get("PMI_JOBID"))
            .unwrap_or_else(|| "run".into());
            let job: String = job
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            return Ok(Some(Launch {
                rank,
                size,
                key: format!("{job}-np{size}"),
                source,
            }));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn launch(vars: &[(&str, &str)]) -> Result<Option<Launch>, ConvertError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Launch::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn launchers_are_recognised() {
        let l = launch(&[
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("PMIX_NAMESPACE", "prterun-x@1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((l.rank, l.size, l.key.as_str()), (2, 4, "prterun-x_1-np4"));
        let l = launch(&[("PMI_SIZE", "8"), ("PMI_RANK", "7")])
            .unwrap()
            .unwrap();
        assert_eq!((l.rank, l.size, l.key.as_str()), (7, 8, "run-np8"));
        let l = launch(&[
            ("SLURM_STEP_NUM_TASKS", "8"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_PROCID", "3"),
            ("SLURM_JOB_ID", "991"),
            ("SLURM_STEP_ID", "0"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((l.rank, l.key.as_str()), (3, "991.0-np8"));
    }

    #[test]
    fn one_process_batch_scripts_and_opt_out_are_not_sharded() {
        assert_eq!(launch(&[]).unwrap(), None);
        assert_eq!(
            launch(&[("OMPI_COMM_WORLD_SIZE", "1"), ("OMPI_COMM_WORLD_RANK", "0")]).unwrap(),
            None
        );
        // sbatch's script: SLURM_NTASKS without a step.
        assert_eq!(
            launch(&[("SLURM_NTASKS", "8"), ("SLURM_PROCID", "0")]).unwrap(),
            None
        );
        assert_eq!(
            launch(&[
                ("OMPI_COMM_WORLD_SIZE", "4"),
                ("OMPI_COMM_WORLD_RANK", "1"),
                (DISABLE_ENV, "0")
            ])
            .unwrap(),
            None
        );
        assert!(launch(&[("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_RANK", "4")]).is_err());
        assert!(launch(&[("PMI_SIZE", "four"), ("PMI_RANK", "0")]).is_err());
    }
}
