//! Writes the core's kernels as CUDA C++ into a folder, with `manifest.json`, for the offline
//! CUDA check (`.ci/cuda-check`, docs/testing.md); needs no GPU:
//! `cargo run -p swa-attention --features cuda-check --example cuda_sources -- DIR`.

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: cuda_sources DIR");
        std::process::exit(2);
    };
    match swa_attention::kernel::write_cuda_sources(std::path::Path::new(&dir)) {
        Ok(count) => println!("{count} kernel variants written to {}", dir.to_string_lossy()),
        Err(problem) => {
            eprintln!("error: {problem}");
            std::process::exit(1);
        }
    }
}
