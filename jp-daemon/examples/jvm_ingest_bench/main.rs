//! Measures the JVM store's ingest speed and memory per node (run in release):
//! `cargo run --release -p jp-daemon --example jvm_ingest_bench -- [NODES] [UPDATES]
//! [ENTRIES_PER_RECORD]`, or what the queries cost, the old way (walk under the store's
//! lock) against the new (snapshot): `... -- queries NODES [RUNS]`.

mod bench;

use bench::{ingest_throughput_with, query_bench};

fn queries(mut args: impl Iterator<Item = String>) {
    let nodes = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let runs = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let q = query_bench(nodes, runs);
    if !q.same_answers {
        eprintln!(
            "jvm_ingest_bench: the two ways answered differently or records were lost: {q:?}"
        );
        std::process::exit(1);
    }
    let ms = |s: f64| s * 1e3;
    println!("nodes                 {}", q.nodes);
    println!("top walk ms           {:.2}", ms(q.top_walk));
    println!("top snapshot ms       {:.2}", ms(q.top_snapshot));
    println!("export walk ms        {:.2}", ms(q.export_walk));
    println!("export snapshot ms    {:.2}", ms(q.export_snapshot));
    println!("stall idle ms         {:.3}", ms(q.stall_idle));
    println!("stall walk ms         {:.3}", ms(q.stall_walk));
    println!("stall snapshot ms     {:.3}", ms(q.stall_snapshot));
    println!(
        "lock wait ms          {:.3} {:.3} {:.3}",
        ms(q.lock_wait[0]),
        ms(q.lock_wait[1]),
        ms(q.lock_wait[2])
    );
    println!(
        "records per phase     {} {} {}",
        q.records[0], q.records[1], q.records[2]
    );
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("queries") {
        args.next();
        queries(args);
        return;
    }
    let nodes = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let updates = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(50_000_000);
    let per = args.next().and_then(|a| a.parse().ok()).unwrap_or(4000);
    let b = ingest_throughput_with(nodes, updates, per);
    if b.node_updates == 0 {
        eprintln!("jvm_ingest_bench: records were dropped, the measure is void: {b:?}");
        std::process::exit(1);
    }
    println!("nodes                 {}", b.nodes);
    println!("entries/record        {}", b.entries_per_record);
    println!("delta records         {}", b.records);
    println!("node updates          {}", b.node_updates);
    println!("seconds               {:.3}", b.seconds);
    println!("cpu seconds           {:.3}", b.cpu_seconds);
    println!("node updates/s        {:.0} (wall)", b.updates_per_sec);
    println!(
        "node updates/cpu-s    {:.0} (one core)",
        b.updates_per_cpu_sec
    );
    println!("records/s             {:.0} (wall)", b.records_per_sec);
    println!(
        "records/cpu-s         {:.0} (one core)",
        b.records_per_cpu_sec
    );
    println!(
        "MB/s of records       {:.1}",
        b.bytes as f64 / b.seconds / 1e6
    );
    println!("bytes/node live       {:.1}", b.bytes_per_node_live);
    println!("bytes/node ended      {:.1}", b.bytes_per_node_ended);
    println!("RSS growth/node live  {:.1}", b.rss_bytes_per_node_live);
    println!("full re-send seconds  {:.4}", b.resync_seconds);
    println!("mct() cpu-s           {:.4}", b.mct_cpu_seconds);
    println!("top_methods() cpu-s   {:.4}", b.top_methods_cpu_seconds);
}
