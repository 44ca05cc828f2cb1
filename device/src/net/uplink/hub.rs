//! A stand-in for the switch until it lands: every frame that comes in on one port goes
//! out of every other (a hub). With two uplinks it bridges them, which the uplink tests
//! use; the switch replaces it in `serve`.

use crate::net::port::{Ingress, Port, PortId};
use std::sync::{Arc, OnceLock};

#[derive(Default)]
pub struct Hub {
    ports: OnceLock<Vec<(PortId, Arc<dyn Port>)>>,
}

impl Hub {
    /// Its ports, once (frames that come before are dropped). Later calls are ignored.
    pub fn connect(&self, ports: Vec<(PortId, Arc<dyn Port>)>) {
        let _ = self.ports.set(ports);
    }
}

impl Ingress for Hub {
    fn receive(&self, from: PortId, frame: &[u8]) {
        for (id, port) in self.ports.get().into_iter().flatten() {
            if *id != from {
                port.transmit(frame);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Sink(Mutex<Vec<Vec<u8>>>);

    impl Port for Sink {
        fn name(&self) -> &str {
            "sink"
        }
        fn transmit(&self, frame: &[u8]) {
            self.0.lock().unwrap().push(frame.to_vec());
        }
    }

    #[test]
    fn a_frame_goes_to_every_port_but_the_one_it_came_from() {
        let (a, b, c) = (
            Arc::new(Sink::default()),
            Arc::new(Sink::default()),
            Arc::new(Sink::default()),
        );
        let hub = Hub::default();
        hub.receive(0, b"early");
        hub.connect(vec![
            (0, a.clone() as Arc<dyn Port>),
            (1, b.clone()),
            (2, c.clone()),
        ]);
        hub.receive(1, b"frame");
        assert_eq!(a.0.lock().unwrap().as_slice(), [b"frame".to_vec()]);
        assert!(b.0.lock().unwrap().is_empty());
        assert_eq!(c.0.lock().unwrap().len(), 1);
    }
}
