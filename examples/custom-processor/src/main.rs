//! `velocity-check`: the streamkeeper worker with one processor of its own besides the built-in
//! ones. A job runs it with `processor: {type: custom, custom: {name: velocity-check, …}}` and
//! this binary's image.

use streamkeeper_example_velocity_check::velocity_check;

fn main() -> std::process::ExitCode {
    streamkeeper_worker::Worker::new()
        .processor(velocity_check())
        .main()
}
