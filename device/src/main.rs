//! `vrnic serve`: serves the configured devices until SIGINT or SIGTERM.

use std::process::ExitCode;
use vrnic::cli::{self, Command};
use vrnic::serve::Service;

/// Blocks SIGINT and SIGTERM in this thread (and so in every thread started after it) so
/// that `wait_for_signal` can take them synchronously.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; the sig* calls only write into it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_signal(set: &libc::sigset_t) -> i32 {
    let mut sig = 0;
    // SAFETY: `set` is an initialised signal set and `sig` a valid out-pointer.
    unsafe { libc::sigwait(set, &mut sig) };
    sig
}

fn serve(args: cli::ServeArgs) -> Result<(), String> {
    let signals = block_signals();
    vrnic::vfio_user::raise_fd_limit();
    let service = Service::start(args.devices, args.poller).map_err(|e| e.to_string())?;
    let sig = wait_for_signal(&signals);
    log::info!("signal {sig}: stopping");
    service.stop();
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match cli::parse(&args) {
        Ok(Command::Help) => {
            println!("{}", cli::USAGE);
            Ok(())
        }
        Ok(Command::Serve(serve_args)) => serve(serve_args),
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vrnic: {e}");
            ExitCode::from(2)
        }
    }
}
