//! The efficiency benchmarks (`swa_zoo::bench`) run end to end on a tiny model, and their
//! KV-cache bytes agree with `Decoder::info` and with MSWA's (15/16)² of SWA.

use swa_zoo::bench::BenchAttention;
use swa_zoo::bench::suite::{Suite, SuitePart, run};
use swa_zoo::report::Table;

use crate::Reference;

#[test]
fn the_efficiency_suite_runs_on_a_tiny_model() {
    let suite = Suite::tiny();
    let mut tables: Vec<(String, Table)> = Vec::new();
    let results = run::<Reference>(&suite, &SuitePart::ALL, &Default::default(), |title, table| {
        tables.push((title.to_string(), table.clone()))
    })
    .expect("the tiny suite runs");
    assert_eq!(tables.len(), 4);

    // Decode: one row per batch for full, per window and batch for the others.
    let decode = &results.decode;
    assert_eq!(decode.len(), (1 + 3 * suite.decode.windows.len()) * suite.decode.batches.len());
    for row in decode {
        assert!(row.ms > 0.0 && row.ms.is_finite(), "{row:?}");
        assert_eq!(row.kv_bytes, row.info_kv_bytes, "measured cache vs Decoder::info: {row:?}");
    }
    let kv = |attention: BenchAttention, window: Option<usize>| {
        decode
            .iter()
            .find(|r| r.attention == attention && r.window == window)
            .expect("row")
            .kv_bytes as f64
    };
    // At W = 16 every MSWA head window (1 … 64) fits in the context of 96.
    let ratio = kv(BenchAttention::Mswa, Some(16)) / kv(BenchAttention::Swa, Some(16));
    assert!((ratio - (15.0f64 / 16.0).powi(2)).abs() < 1e-12, "MSWA / SWA KV bytes {ratio}");
    assert_eq!(kv(BenchAttention::Swat, Some(16)), kv(BenchAttention::Swa, Some(16)));
    let model = &suite.decode.model;
    let full_bytes =
        model.layers * model.heads * suite.decode.context * 2 * (model.d_model / model.heads) * 4;
    assert_eq!(kv(BenchAttention::Full, None) as usize, full_bytes);

    // Flatness: full attention stops at its limit, the windowed kinds reach the last position.
    for row in &results.flatness {
        let measured = row.ms.iter().flatten().count();
        let expected =
            if row.attention == BenchAttention::Full { 1 } else { suite.flatness.positions.len() };
        assert_eq!(measured, expected, "{row:?}");
    }

    // StreamingLLM's sinks + recent keys hold as many keys as SWA's window.
    let streaming = &results.streaming;
    assert_eq!(streaming.len(), 4);
    assert_eq!(streaming[0].kv_bytes, streaming[2].kv_bytes);
    assert!(streaming[3].kv_bytes > streaming[2].kv_bytes);

    // Training: full attention past its score budget is skipped with a reason; the rest run.
    let training = &results.training;
    assert_eq!(training.len(), suite.training.attentions.len() * suite.training.lengths.len());
    for row in training {
        let too_big = row.attention == BenchAttention::Full && row.len == 64;
        assert_eq!(row.skipped.is_some(), too_big, "{row:?}");
        if !too_big {
            assert!(row.tokens_per_s > 0.0 && row.tokens_per_s.is_finite(), "{row:?}");
        }
    }
    let markdown = tables[3].1.markdown();
    assert!(markdown.contains("skipped: one layer's H·N² f32 scores"), "{markdown}");
}

/// The quick suite of `swa-zoo bench` on flex, printed; run by hand:
/// `cargo test --features flex --test zoo quick_efficiency_suite -- --ignored --nocapture`.
#[cfg(feature = "flex")]
#[test]
#[ignore = "a measurement (minutes), not a check"]
fn quick_efficiency_suite_on_flex() {
    let device = Default::default();
    run::<burn::backend::Autodiff<burn::backend::Flex>>(
        &Suite::quick(),
        &SuitePart::ALL,
        &device,
        |title, table| println!("{title}\n\n{}", table.markdown()),
    )
    .expect("the quick suite runs");
}

/// Time per token against the position up to 16k with the CPU model of the full suite, printed:
/// `cargo test --features flex --test zoo flatness_to_16k -- --ignored --nocapture`.
#[cfg(feature = "flex")]
#[test]
#[ignore = "a measurement (minutes), not a check"]
fn flatness_to_16k_on_flex() {
    let suite = Suite::full(swa_zoo::bench::BenchModel::cpu(), 8192);
    run::<burn::backend::Autodiff<burn::backend::Flex>>(
        &suite,
        &[SuitePart::Flatness],
        &Default::default(),
        |title, table| println!("{title}\n\n{}", table.markdown()),
    )
    .expect("the flatness run");
}
