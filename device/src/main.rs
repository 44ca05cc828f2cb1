//! `vrnic serve`: serves the configured devices until SIGINT or SIGTERM.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use vmm_sys_util::eventfd::EventFd;
use vrnic::cli::{self, Command};
use vrnic::fabric::Fabric;
use vrnic::rnic::RnicModel;
use vrnic::vfio_user::{DeviceModel, Server};

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
    let fabric = Fabric::new(args.devices).map_err(|e| e.to_string())?;
    let stop = Arc::new(EventFd::new(libc::EFD_NONBLOCK).map_err(|e| e.to_string())?);
    let mut threads = Vec::new();
    for rnic in fabric.devices() {
        let model: Arc<Mutex<dyn DeviceModel>> = Arc::new(Mutex::new(RnicModel(rnic.clone())));
        let server = Server::bind(&rnic.config.socket, model)
            .map_err(|e| format!("device {}: {e}", rnic.name()))?;
        let (stop, name) = (stop.clone(), rnic.name().to_string());
        threads.push(
            std::thread::Builder::new()
                .name(format!("vfio-user-{name}"))
                .spawn(move || {
                    if let Err(e) = server.run(&stop) {
                        log::error!("device {name}: server failed: {e}");
                    }
                })
                .map_err(|e| e.to_string())?,
        );
        log::info!(
            "device {} (LID {}) listening on {}",
            rnic.name(),
            rnic.lid(),
            rnic.config.socket.display()
        );
    }
    let poller = fabric
        .start_poller(args.poller)
        .map_err(|e| e.to_string())?;
    let sig = wait_for_signal(&signals);
    log::info!("signal {sig}: stopping");
    let _ = stop.write(1);
    fabric.waker().stop();
    for t in threads {
        let _ = t.join();
    }
    let _ = poller.join();
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
