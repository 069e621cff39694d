//! A root broker that can be switched on and off: a TCP proxy in front of
//! the real RabbitMQ on 127.0.0.1:5672.

/// A root that is unreachable until switched on: a listener that drops
/// every connection while off and forwards each to RabbitMQ once on.
/// Switching it off again also cuts the connections it forwards, the way a
/// root's machine going away does (no AMQP close, the socket just ends).
pub struct GatedRoot {
    pub url: String,
    on: std::sync::Arc<std::sync::atomic::AtomicBool>,
    forwards: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl GatedRoot {
    pub async fn start() -> GatedRoot {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("amqp://guest:guest@{}/%2f", listener.local_addr().unwrap());
        let on = std::sync::Arc::new(AtomicBool::new(false));
        let forwards = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let gate = on.clone();
        let running = forwards.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !gate.load(Ordering::SeqCst) {
                    continue; // dropped: the edge sees its root go away
                }
                let forward = tokio::spawn(async move {
                    if let Ok(mut broker) = tokio::net::TcpStream::connect("127.0.0.1:5672").await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut broker).await;
                    }
                });
                running.lock().unwrap().push(forward);
            }
        });
        GatedRoot {
            url,
            on,
            forwards,
            task,
        }
    }

    pub fn switch_on(&self) {
        self.on.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Refuse new connections and cut the ones forwarded so far.
    pub fn switch_off(&self) {
        self.on.store(false, std::sync::atomic::Ordering::SeqCst);
        for forward in self.forwards.lock().unwrap().drain(..) {
            forward.abort();
        }
    }
}

impl Drop for GatedRoot {
    fn drop(&mut self) {
        self.switch_off();
        self.task.abort();
    }
}
