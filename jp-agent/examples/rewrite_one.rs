//! Developer aid: rewrites one class file as the agent would and writes the result, so that
//! `javap -c -p` can show the injected code. `cargo run -p jp-agent --example rewrite_one --
//! IN.class OUT.class [default|precise]`.
use jpagent::classfile::{rewrite_class, Bba, MethodIds, RewriteOptions, Rewritten};

struct Sequential(u32);
impl MethodIds for Sequential {
    fn method_id(&mut self, _: &str, _: &str, _: &str, _: Option<&str>) -> u32 {
        self.0 += 1;
        self.0
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(input), Some(output)) = (args.get(1), args.get(2)) else {
        return Err("usage: rewrite_one IN.class OUT.class [default|precise]".into());
    };
    let bba = match args.get(3).map(String::as_str) {
        Some("precise") => Bba::Precise,
        _ => Bba::Default,
    };
    let bytes = std::fs::read(input)?;
    match rewrite_class(
        &bytes,
        &RewriteOptions {
            bba,
            pass_context: true,
            out_of_line_entry: false,
        },
        &mut Sequential(0),
    )? {
        Rewritten::Changed { bytes, stats } => {
            std::fs::write(output, bytes)?;
            eprintln!("{stats:?}");
        }
        Rewritten::Unchanged { reason } => eprintln!("unchanged: {reason}"),
    }
    Ok(())
}
