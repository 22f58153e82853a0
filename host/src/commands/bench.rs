//! `modnode bench …`.

use anyhow::Context as _;

/// `modnode bench host-call`.
pub fn host_call(json: bool, calls: u64) -> anyhow::Result<()> {
    let path = modnode::artifacts::path("fixture-hostcall");
    let fixture = std::fs::read(&path).with_context(|| {
        format!(
            "cannot read {} (the benchmark runs from a modnode checkout: `cargo build` first)",
            path.display()
        )
    })?;
    let params = crate::bench::host_call::HostCallParams {
        calls,
        ..Default::default()
    };
    let report = crate::bench::host_call::run(&params, &fixture)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "host call (48-byte list arg): {:.1} ns",
            report.host_call_ns
        );
        println!(
            "instantiate from InstancePre: {:.1} µs",
            report.instantiate_us
        );
        println!("compile deposits-v1:          {:.1} ms", report.compile_ms);
        println!(
            "load cached deposits-v1:      {:.2} ms ({:.0}x faster)",
            report.cached_load_ms, report.compile_to_cached_ratio
        );
        println!(
            "empty call (fresh instance):  {:.1} µs",
            report.empty_call_us
        );
        println!(
            "gossip-policy-v2 plan, 8 peers: {:.2} µs ({:.2} µs stateful v2, {:.2} µs from a non-guest thread)",
            report.plan_call_us, report.plan_call_stateful_us, report.plan_call_handoff_us
        );
    }
    Ok(())
}

/// `modnode bench deposits`.
pub fn deposits(json: bool, validators: u32, deposits: usize, repeat: usize) -> anyhow::Result<()> {
    anyhow::ensure!(validators >= 1, "--validators must be at least 1");
    anyhow::ensure!(deposits >= 1, "--deposits must be at least 1");
    let report = crate::bench::deposits::run(validators, deposits, repeat)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// `modnode bench deposits-v3`.
pub fn deposits_v3(json: bool, params: crate::bench::deposits_v3::Params) -> anyhow::Result<()> {
    let report = crate::bench::deposits_v3::run(params)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// `modnode bench gossip`.
pub fn gossip(
    json: bool,
    nodes: usize,
    degree: usize,
    seed: u64,
    repeat: usize,
) -> anyhow::Result<()> {
    let params = crate::bench::gossip::GossipParams {
        nodes,
        degree,
        seed,
        repeat,
        ..Default::default()
    };
    let report = crate::bench::gossip::run(&params)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// `modnode bench gossip-sim`.
pub fn gossip_sim(
    json: bool,
    nodes: usize,
    degree: usize,
    seed: u64,
    messages: usize,
) -> anyhow::Result<()> {
    let params = crate::bench::gossip_sim::GossipSimParams {
        nodes,
        degree,
        seed,
        messages,
        ..Default::default()
    };
    let report = crate::bench::gossip_sim::run(&params)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// `modnode bench swap`.
pub fn swap(json: bool, validators: u32, blocks: usize) -> anyhow::Result<()> {
    let report = crate::bench::swap::run(validators, blocks)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// `modnode bench prune`.
pub fn prune(
    json: bool,
    validators: u32,
    blocks: u64,
    window: u64,
    reps: u32,
    pruned_only: bool,
) -> anyhow::Result<()> {
    anyhow::ensure!(validators >= 1, "--validators must be at least 1");
    anyhow::ensure!(blocks > window, "--blocks must exceed --window");
    anyhow::ensure!(reps >= 1, "--reps must be at least 1");
    let report = crate::bench::prune::run_all(validators, blocks, window, reps, !pruned_only)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// `modnode bench state-cache`.
pub fn state_cache(
    json: bool,
    validators: u32,
    blocks: usize,
    generous_mb: u64,
    tight_mb: u64,
    store: crate::bench::state_cache::StoreKind,
) -> anyhow::Result<()> {
    anyhow::ensure!(validators >= 1, "--validators must be at least 1");
    anyhow::ensure!(blocks >= 10, "--blocks must be at least 10");
    let report = crate::bench::state_cache::run(validators, blocks, generous_mb, tight_mb, store)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// `modnode bench checkpoint`.
pub fn checkpoint(
    json: bool,
    validators: u32,
    target_chunk_bytes: u64,
    import_blocks: usize,
) -> anyhow::Result<()> {
    anyhow::ensure!(validators >= 1, "--validators must be at least 1");
    anyhow::ensure!(import_blocks >= 1, "--import-blocks must be at least 1");
    let report = crate::bench::checkpoint::run(validators, target_chunk_bytes, import_blocks)?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}
