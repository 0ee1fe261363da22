//! `streamkeeper-worker`: the worker binary, with the built-in processors. A binary with
//! processors of its own is the same few lines with its registrations (`examples/custom-processor`).

fn main() -> std::process::ExitCode {
    streamkeeper_worker::Worker::new().main()
}
