//! Prints the `verify` table: `cargo run -p engine --release --example verify -- A=5,B=3,C=2 100000 100 [seed] [--json]`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let rest: Vec<&String> = args.iter().filter(|a| *a != "--json").collect();
    let spec = rest.first().map_or("A=5,B=3,C=2", |s| s.as_str());
    let draws = rest.get(1).map_or(100_000, |s| s.parse().expect("draws"));
    let window = rest.get(2).map_or(100, |s| s.parse().expect("window"));
    let seed = rest.get(3).map_or(1, |s| s.parse().expect("seed"));
    let weights = match engine::Weights::parse_spec(spec) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let report = engine::verify::verify(&weights, draws, window, seed);
    if json {
        println!("{}", serde_json::to_string_pretty(&report).expect("serialisable"));
    } else {
        print!("{}", engine::verify::render_table(&report));
    }
}
