//! Schema probing: which tables exist and which columns each has, so one reader works across
//! export schema versions (tables are created lazily, column sets grow between versions).

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, Row};

/// Tables and their columns, read from `sqlite_master` and `PRAGMA table_info`.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    tables: BTreeMap<String, BTreeSet<String>>,
}

/// A column a query wants: required columns must exist (else the table is skipped with a
/// warning); optional ones read as NULL when absent.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Col {
    Req(&'static str),
    Opt(&'static str),
}

impl Schema {
    /// Probes every table of the database.
    pub fn probe(conn: &Connection) -> rusqlite::Result<Schema> {
        let mut names = Vec::new();
        {
            let mut stmt = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                if let Some(name) = text(row, 0) {
                    names.push(name);
                }
            }
        }
        let mut tables = BTreeMap::new();
        for name in names {
            let mut cols = BTreeSet::new();
            let sql = format!("PRAGMA table_info({})", quote_ident(&name));
            let mut stmt = conn.prepare(&sql)?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                if let Some(col) = text(row, 1) {
                    cols.insert(col);
                }
            }
            tables.insert(name, cols);
        }
        Ok(Schema { tables })
    }

    /// Builds a schema from explicit tables (tests).
    pub fn from_tables<'a>(tables: impl IntoIterator<Item = (&'a str, &'a [&'a str])>) -> Schema {
        Schema {
            tables: tables
                .into_iter()
                .map(|(t, cols)| (t.to_string(), cols.iter().map(|c| c.to_string()).collect()))
                .collect(),
        }
    }

    pub fn has_table(&self, table: &str) -> bool {
        self.tables.contains_key(table)
    }

    pub fn has_column(&self, table: &str, column: &str) -> bool {
        self.tables.get(table).is_some_and(|c| c.contains(column))
    }

    /// Table names, sorted.
    pub fn table_names(&self) -> impl Iterator<Item = &str> {
        self.tables.keys().map(String::as_str)
    }

    pub fn table_count(&self) -> usize {
        self.tables.len()
    }

    /// `SELECT <cols> FROM <table>` with NULL in place of absent optional columns, or the name of
    /// the first missing required column (or the table itself).
    pub(crate) fn select(&self, table: &str, cols: &[Col], tail: &str) -> Result<String, String> {
        let Some(have) = self.tables.get(table) else {
            return Err(format!("table {table} is absent"));
        };
        let mut parts = Vec::with_capacity(cols.len());
        for col in cols {
            match *col {
                Col::Req(c) if have.contains(c) => parts.push(quote_ident(c)),
                Col::Req(c) => return Err(format!("table {table} lacks required column {c}")),
                Col::Opt(c) if have.contains(c) => parts.push(quote_ident(c)),
                Col::Opt(_) => parts.push("NULL".to_string()),
            }
        }
        Ok(format!(
            "SELECT {} FROM {} {tail}",
            parts.join(", "),
            quote_ident(table)
        ))
    }
}

/// Double-quotes an SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Reads column `idx` as an integer, whatever its storage class: REAL truncates, TEXT parses
/// (NULL when it does not), BLOB and NULL give None. Never fails, so odd rows cannot abort a read.
pub(crate) fn int(row: &Row<'_>, idx: usize) -> Option<i64> {
    match row.get_ref(idx).ok()? {
        ValueRef::Integer(v) => Some(v),
        ValueRef::Real(v) if v.is_finite() => Some(v as i64),
        ValueRef::Text(t) => std::str::from_utf8(t).ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// Reads column `idx` as a float (INTEGER converts, TEXT parses).
pub(crate) fn real(row: &Row<'_>, idx: usize) -> Option<f64> {
    match row.get_ref(idx).ok()? {
        ValueRef::Integer(v) => Some(v as f64),
        ValueRef::Real(v) => Some(v),
        ValueRef::Text(t) => std::str::from_utf8(t).ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// Reads column `idx` as text (numbers are formatted; invalid UTF-8 is replaced).
pub(crate) fn text(row: &Row<'_>, idx: usize) -> Option<String> {
    match row.get_ref(idx).ok()? {
        ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Integer(v) => Some(v.to_string()),
        ValueRef::Real(v) => Some(v.to_string()),
        ValueRef::Blob(b) => Some(String::from_utf8_lossy(b).into_owned()),
        ValueRef::Null => None,
    }
}

/// Length of a BLOB (or TEXT) column, None when NULL.
pub(crate) fn blob_len(row: &Row<'_>, idx: usize) -> Option<usize> {
    match row.get_ref(idx).ok()? {
        ValueRef::Blob(b) | ValueRef::Text(b) => Some(b.len()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_substitutes_null_for_absent_optional_columns() {
        let s = Schema::from_tables([("T", &["start", "end"][..])]);
        let sql = s
            .select("T", &[Col::Req("start"), Col::Opt("gridX")], "")
            .unwrap();
        assert_eq!(sql.trim(), "SELECT \"start\", NULL FROM \"T\"");
        assert_eq!(
            s.select("T", &[Col::Req("nope")], "").unwrap_err(),
            "table T lacks required column nope"
        );
        assert_eq!(
            s.select("U", &[Col::Req("start")], "").unwrap_err(),
            "table U is absent"
        );
    }

    #[test]
    fn quote_ident_escapes_quotes() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }

    #[test]
    fn lenient_value_reads() {
        let c = Connection::open_in_memory().unwrap();
        c.query_row("SELECT 5, 2.9, ' 17 ', 'x', NULL, X'0102'", [], |r| {
            assert_eq!(int(r, 0), Some(5));
            assert_eq!(int(r, 1), Some(2));
            assert_eq!(int(r, 2), Some(17));
            assert_eq!(int(r, 3), None);
            assert_eq!(int(r, 4), None);
            assert_eq!(int(r, 5), None);
            assert_eq!(real(r, 1), Some(2.9));
            assert_eq!(text(r, 0).as_deref(), Some("5"));
            assert_eq!(blob_len(r, 5), Some(2));
            assert_eq!(int(r, 99), None);
            Ok(())
        })
        .unwrap();
    }
}
