//! FORMAT.md must list every record kind of the code with the same id, name and size.

use sigmatrace_schemas::*;
use std::collections::BTreeMap;

#[test]
fn format_md_table_matches_the_code() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/FORMAT.md")).unwrap();
    let mut table: BTreeMap<u16, (String, String)> = BTreeMap::new();
    for line in doc.lines() {
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        if cols.len() > 5 {
            if let Ok(id) = cols[1].parse::<u16>() {
                if matches!(cols[3], "hot" | "meta") {
                    assert!(
                        table
                            .insert(id, (cols[2].to_string(), cols[4].to_string()))
                            .is_none(),
                        "id {id} listed twice"
                    );
                }
            }
        }
    }
    for kind in RecordKind::ALL {
        let (name, size) = table.remove(&(*kind as u16)).unwrap_or_else(|| {
            panic!(
                "{} (id {}) missing from FORMAT.md",
                kind.name(),
                *kind as u16
            )
        });
        assert_eq!(
            name,
            kind.name(),
            "id {} has another name in FORMAT.md",
            *kind as u16
        );
        match kind.fixed_size() {
            Some(s) => assert_eq!(size, s.to_string(), "size of {}", kind.name()),
            None => assert_eq!(size, "variable"),
        }
    }
    assert!(
        table.is_empty(),
        "FORMAT.md lists kinds the code lacks: {table:?}"
    );
    for (id, _) in RecordKind::RETIRED {
        assert!(RecordKind::from_id(*id).is_none());
    }
    let max = RecordKind::ALL
        .iter()
        .map(|k| *k as u16)
        .chain(RecordKind::RETIRED.iter().map(|r| r.0))
        .max()
        .unwrap();
    assert_eq!(RecordKind::NEXT_FREE_ID, max + 1);
    assert!(doc.contains(&format!("Next free id: {}.", RecordKind::NEXT_FREE_ID)));
    assert!(doc.contains(&format!("Version **{FORMAT_MAJOR}.{FORMAT_MINOR}**")));
}
