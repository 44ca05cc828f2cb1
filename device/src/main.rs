//! `vrnic serve`: serves the configured devices until SIGINT or SIGTERM.
//! `vrnic ctl`: asks a running `vrnic serve` about its devices (its control socket).

use std::io::Write;
use std::process::ExitCode;
use vrnic::cli::{self, Command};
use vrnic::control::{client, render};
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
    let mut service =
        Service::start_with_control(args.devices, args.poller, args.control.as_deref())
            .map_err(|e| e.to_string())?;
    service.start_net(&args.net).map_err(|e| e.to_string())?;
    service
        .start_uplinks(&args.uplinks)
        .map_err(|e| e.to_string())?;
    for file in &args.faults {
        file.apply(service.fabric())
            .map_err(|e| format!("--faults {}: {e}", file.device))?;
    }
    let sig = wait_for_signal(&signals);
    log::info!("signal {sig}: stopping");
    service.stop();
    Ok(())
}

/// One request to the control socket; the reply as text (or its JSON line).
fn ctl(args: cli::CtlArgs) -> Result<(), String> {
    if let vrnic::control::Request::Trace { .. } = args.request {
        return trace(args);
    }
    let reply = client::call(&args.control, &args.request).map_err(|e| e.to_string())?;
    let text = if args.json {
        reply + "\n"
    } else {
        render::render(&args.request, &reply).map_err(|e| format!("cannot read the reply: {e}"))?
    };
    // A reader that stops early (`| head`) is not an error.
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("stdout: {e}")),
        _ => Ok(()),
    }
}

/// `vrnic ctl trace`: the stream's lines as text (or as they come, with `--json`) until
/// the server ends it or the user interrupts.
fn trace(args: cli::CtlArgs) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    vrnic::control::trace::follow(&args.control, &args.request, |line| {
        let text = match args.json {
            true => format!("{line}\n"),
            false => vrnic::control::trace::render_line(line).map_err(std::io::Error::other)?,
        };
        out.write_all(text.as_bytes())?;
        out.flush()
    })
    .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match cli::parse(&args) {
        Ok(Command::Help) => {
            println!("{}", cli::usage());
            Ok(())
        }
        Ok(Command::Serve(serve_args)) => serve(serve_args),
        Ok(Command::Ctl(ctl_args)) => return exit(ctl(ctl_args), 1),
        Err(e) => Err(e.to_string()),
    };
    exit(result, 2)
}

/// Success, or the error on stderr and exit status `code` (2: bad usage or a failed
/// start; `vrnic ctl` uses 1 for an error the server answered or a socket that failed).
fn exit(result: Result<(), String>, code: u8) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vrnic: {e}");
            ExitCode::from(code)
        }
    }
}
