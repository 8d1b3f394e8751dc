//! Generates versioned ELF entry points from one table.
//!
//! A table file has two kinds of lines (`#` starts a comment):
//!
//! ```text
//! node IBVERBS_1.1 IBVERBS_1.0      # version node, optional parent
//! sym  IBVERBS_1.1 @@ ibv_open_device sv_ibv_open_device
//! sym  IBVERBS_1.0 @  ibv_open_device sv_compat_ptr
//! data IBVERBS_PRIVATE_34 @@ verbs_allow_disassociate_destroy 1
//! ```
//!
//! A `data` line exports a zero-initialised object of the given size in bytes (for the few
//! exported variables) instead of a trampoline.
//!
//! `@@` is the default version of a name, `@` a hidden (compat) version. For each `sym` line the
//! generator emits an x86_64 trampoline `jmp target@PLT` and a `.symver` directive naming it
//! `name@VERSION` / `name@@VERSION`; the node lines become a linker version script. Rust
//! implementations are exported under their own (`sv_*`) names, which the trampolines jump to.

use std::fmt::Write as _;
use std::path::Path;

/// Errors while reading or checking a symbol table.
#[derive(Debug, thiserror::Error)]
pub enum SymverError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("line {line}: {msg}")]
    Parse { line: usize, msg: String },
}

/// One versioned export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sym {
    pub version: String,
    pub default: bool,
    pub name: String,
    /// The `sv_*` function the trampoline jumps to; `None` for a data object.
    pub target: Option<String>,
    /// Size in bytes of a data object (0 for functions).
    pub size: usize,
}

/// A parsed table: version nodes (name, parent) in order, and symbols.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub nodes: Vec<(String, Option<String>)>,
    pub syms: Vec<Sym>,
}

impl Table {
    /// Parses the table text.
    pub fn parse(text: &str) -> Result<Table, SymverError> {
        let mut t = Table::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            let err = |msg: &str| SymverError::Parse {
                line: i + 1,
                msg: format!("{msg}: {raw}"),
            };
            match f[0] {
                "node" if f.len() == 2 || f.len() == 3 => t
                    .nodes
                    .push((f[1].to_string(), f.get(2).map(|s| s.to_string()))),
                "sym" | "data" if f.len() == 5 => {
                    let default = match f[2] {
                        "@@" => true,
                        "@" => false,
                        _ => return Err(err("expected @ or @@")),
                    };
                    if !t.nodes.iter().any(|(n, _)| n == f[1]) {
                        return Err(err("unknown version node"));
                    }
                    let (target, size) = if f[0] == "sym" {
                        (Some(f[4].to_string()), 0)
                    } else {
                        let n = f[4].parse::<usize>().map_err(|_| err("bad data size"))?;
                        (None, n)
                    };
                    t.syms.push(Sym {
                        version: f[1].to_string(),
                        default,
                        name: f[3].to_string(),
                        target,
                        size,
                    });
                }
                _ => return Err(err("malformed line")),
            }
        }
        for s in &t.syms {
            let n = t
                .syms
                .iter()
                .filter(|o| o.name == s.name && o.default && s.default)
                .count();
            if n > 1 {
                return Err(SymverError::Parse {
                    line: 0,
                    msg: format!("{} has two default versions", s.name),
                });
            }
        }
        Ok(t)
    }

    /// Reads and parses a table file.
    pub fn load(path: &Path) -> Result<Table, SymverError> {
        let text = std::fs::read_to_string(path).map_err(|source| SymverError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Table::parse(&text)
    }

    /// The linker version script declaring every node.
    pub fn version_script(&self) -> String {
        let mut s = String::new();
        for (n, parent) in &self.nodes {
            match parent {
                Some(p) => writeln!(s, "{n} {{ }} {p};").unwrap(),
                None => writeln!(s, "{n} {{ }};").unwrap(),
            }
        }
        s
    }

    /// Assembly text (for `global_asm!`) with one trampoline per function and one object per
    /// data export.
    pub fn asm(&self) -> String {
        let mut s = String::from(".text\n");
        for sym in &self.syms {
            let tramp = format!(
                "{}__{}__tramp",
                sym.name,
                sym.version.replace(['.', '-'], "_")
            );
            let at = if sym.default { "@@" } else { "@" };
            let Some(target) = &sym.target else {
                writeln!(s, ".data\n.globl {tramp}\n.type {tramp},@object").unwrap();
                writeln!(
                    s,
                    ".size {tramp}, {}\n{tramp}:\n    .zero {}",
                    sym.size, sym.size
                )
                .unwrap();
                writeln!(s, ".symver {tramp}, {}{at}{}\n.text", sym.name, sym.version).unwrap();
                continue;
            };
            writeln!(s, ".globl {tramp}").unwrap();
            writeln!(s, ".type {tramp},@function").unwrap();
            writeln!(s, ".p2align 4").unwrap();
            writeln!(s, "{tramp}:").unwrap();
            writeln!(s, "    jmp {target}@PLT").unwrap();
            writeln!(s, ".size {tramp}, .-{tramp}").unwrap();
            writeln!(s, ".symver {tramp}, {}{at}{}", sym.name, sym.version).unwrap();
        }
        s
    }

    /// Writes `<stem>.s` and `<stem>.map` into `out_dir`, returning their paths.
    pub fn write(
        &self,
        out_dir: &Path,
        stem: &str,
    ) -> Result<(std::path::PathBuf, std::path::PathBuf), SymverError> {
        let asm = out_dir.join(format!("{stem}.s"));
        let map = out_dir.join(format!("{stem}.map"));
        let io = |p: &Path| {
            let p = p.display().to_string();
            move |source| SymverError::Io { path: p, source }
        };
        std::fs::write(&asm, self.asm()).map_err(io(&asm))?;
        std::fs::write(&map, self.version_script()).map_err(io(&map))?;
        Ok((asm, map))
    }
}

/// The build-script step of a replacement library: writes the trampolines (`<stem>.s`, for the
/// crate's `global_asm!`) and version script of the table at `table` into `out_dir`, and tells
/// cargo to rerun when the table changes and to link the cdylib with that version script under
/// `soname`.
pub fn build_exports(
    table: &Path,
    out_dir: &Path,
    stem: &str,
    soname: &str,
) -> Result<(), SymverError> {
    println!("cargo:rerun-if-changed={}", table.display());
    let (_asm, map) = Table::load(table)?.write(out_dir, stem)?;
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_generates() {
        let t = Table::parse(
            "node A_1.0\nnode A_1.1 A_1.0\nsym A_1.1 @@ f sv_f\nsym A_1.0 @ f sv_old # c\n",
        )
        .unwrap();
        assert_eq!(t.syms.len(), 2);
        assert!(t.version_script().contains("A_1.1 { } A_1.0;"));
        let asm = t.asm();
        assert!(asm.contains(".symver f__A_1_1__tramp, f@@A_1.1"));
        assert!(asm.contains(".symver f__A_1_0__tramp, f@A_1.0"));
        assert!(asm.contains("jmp sv_old@PLT"));
    }

    #[test]
    fn data_lines_become_sized_objects() {
        let t = Table::parse("node P\ndata P @@ flag 1\n").unwrap();
        assert_eq!(t.syms[0].target, None);
        let asm = t.asm();
        assert!(asm.contains(".type flag__P__tramp,@object"), "{asm}");
        assert!(asm.contains(".zero 1"), "{asm}");
        assert!(asm.contains(".symver flag__P__tramp, flag@@P"), "{asm}");
        assert!(Table::parse("node P\ndata P @@ flag x\n").is_err());
    }

    #[test]
    fn rejects_unknown_node_and_double_default() {
        assert!(Table::parse("sym X @@ f g\n").is_err());
        assert!(Table::parse("node X\nsym X @@ f g\nsym X @@ f h\n").is_err());
        assert!(Table::parse("node X\nsym X @! f g\n").is_err());
    }
}
