//! Starting a server as `tensorwasm serve` does: two tokio runtimes (HTTP,
//! and the guests', so busy guests never hold up requests), a runtime on
//! every device the chosen driver sees, the listener, and the HTTP service
//! until SIGTERM or Ctrl-C. The command line that fills [`ServeOptions`]
//! is the `tensorwasm` binary's.

use std::{io::Write as _, net::SocketAddr, sync::Arc, time::Duration};

use tensorwasm_embed::run::{Chosen, DriverChoice, choose_driver};

use crate::{ServeConfig, ServeDriver, Server, http};

/// How to start a server.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The tenants, their tokens and limits.
    pub config: ServeConfig,
    /// Listen here instead of the config's `listen`.
    pub listen: Option<SocketAddr>,
    /// The driver; CUDA serves every device it can see.
    pub driver: DriverChoice,
    /// On the CPU driver, a failing kernel loses the whole device, as a
    /// faulting kernel loses a CUDA context (to exercise the handling of a
    /// lost device without a GPU).
    pub cpu_faults_lose_device: bool,
}

/// Serves until a shutdown signal; prints `listening on http://ADDR` to
/// stdout once bound. The error says what stopped it, in one line.
pub fn serve(options: ServeOptions) -> Result<(), String> {
    let ServeOptions {
        mut config,
        listen,
        driver,
        cpu_faults_lose_device,
    } = options;
    if let Some(listen) = listen {
        config.listen = listen;
    }
    // Each runtime as many threads as cores, at least 2.
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    let runtime = |name: &str| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
    };
    let (tokio, guests) = match (runtime("tensorwasm-http"), runtime("tensorwasm-guest")) {
        (Ok(t), Ok(g)) => (t, g),
        (Err(e), _) | (_, Err(e)) => return Err(format!("starting the runtime: {e}")),
    };
    let guests_handle = guests.handle().clone();
    let served = match choose_driver(driver).map_err(|e| e.to_string())? {
        Chosen::Cuda(first) => {
            let mut drivers = vec![(0, first)];
            let count = tensorwasm_cuda::CudaDriver::probe().map_or(1, |d| d.len());
            for ordinal in 1..count {
                let ordinal = u32::try_from(ordinal).map_err(|e| e.to_string())?;
                match tensorwasm_cuda::CudaDriver::new(ordinal) {
                    Ok(d) => drivers.push((ordinal, d)),
                    Err(e) => return Err(format!("CUDA device {ordinal}: {e}")),
                }
            }
            tokio.block_on(serve_on(config, drivers, guests_handle))
        }
        Chosen::Cpu(driver, _) => {
            driver.set_faults_lose_device(cpu_faults_lose_device);
            tokio.block_on(serve_on(config, vec![(0, driver)], guests_handle))
        }
    };
    // Guests still running past the shutdown are stopped with their runtime.
    guests.shutdown_timeout(Duration::from_secs(1));
    served
}

async fn serve_on<D: ServeDriver>(
    config: ServeConfig,
    drivers: Vec<(u32, D)>,
    guests: tokio::runtime::Handle,
) -> Result<(), String> {
    let listen = config.listen;
    let server = Arc::new(Server::new(config, drivers, guests)?);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("tensorwasm serve: listening on http://{bound}");
    let _ = std::io::stdout().flush();
    http::serve(server, listener, http::shutdown_signal())
        .await
        .map_err(|e| e.to_string())
}
