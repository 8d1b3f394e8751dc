//! Prints what an Nsight Systems SQLite export holds: `cargo run -p sigmatrace-nsys --example
//! summary -- report.sqlite [--json]`. (`sigmatrace-convert nsys-summary` is the user command.)

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: summary REPORT.sqlite [--json]");
        std::process::exit(2);
    };
    match sigmatrace_nsys::NsysReport::open(path) {
        Ok(r) if json => println!("{}", r.summary().to_json()),
        Ok(r) => print!("{}", r.summary().to_table()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
