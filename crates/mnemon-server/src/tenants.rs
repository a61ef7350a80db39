//! The services of the namespaces a server serves: each opened on its first request, the most
//! recently used kept open.
//!
//! A server with keys serves every key's namespace. Each open service holds its namespace's
//! store handles. With SQLite the handles of every namespace share their file's connections
//! (`mnemon_db::sqlite::Shared`), so an open service costs little memory and no file
//! descriptor; with PostgreSQL they share one pool. Still, kept forever, a server that had served
//! millions of tenants would hold a handle, a thread mirror and a cache entry for each. So at
//! most [`MAX_OPEN_NAMESPACES`] services stay open, and the least recently used is closed when
//! another must open; its next request opens it again (with SQLite, on the file's connections
//! that the other open namespaces hold). A closed service's requests in flight
//! keep their clone of it and finish; its stores close when the last one does.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use mnemon_db::Namespace;
use mnemon_ops::{OpsError, Service};

/// The most namespaces whose services a server keeps open by default (docs/limits.md): past
/// it, the least recently used is closed and reopened on its next request.
pub const MAX_OPEN_NAMESPACES: usize = 256;

/// The most services closed at once when the server stops (threads of their own).
const CLOSING_THREADS: usize = 64;

/// Opens the [`Service`] of a namespace (blocking: it may connect to a database).
pub type ServiceOpener = dyn Fn(&Namespace) -> Result<Service, OpsError> + Send + Sync;

/// The services of the namespaces requests use, opened on first use; at most a capacity of
/// them stay open, the least recently used closed first.
pub struct Tenants {
    open: Box<ServiceOpener>,
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    services: HashMap<Namespace, Entry>,
    /// Counts uses: the recency of each entry.
    tick: u64,
    /// Every namespace served since start, open or closed since, for the expiry sweep.
    served: BTreeSet<Namespace>,
}

struct Entry {
    service: Service,
    used: u64,
    /// Never closed: [`Tenants::single`]'s service, which its opener cannot open again.
    pinned: bool,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl Tenants {
    /// Services opened by `open`, one per namespace, at most [`MAX_OPEN_NAMESPACES`] open.
    pub fn new(
        open: impl Fn(&Namespace) -> Result<Service, OpsError> + Send + Sync + 'static,
    ) -> Tenants {
        Tenants {
            open: Box::new(open),
            capacity: MAX_OPEN_NAMESPACES,
            state: Mutex::default(),
        }
    }

    /// Keeps at most `capacity` services open (at least 1) from now on: `mnemon serve
    /// --max-open-namespaces`.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(1);
    }

    /// Only `service`'s namespace, kept open: any other is refused.
    pub fn single(service: Service) -> Tenants {
        let namespace = service.stores().namespace().clone();
        let refused = namespace.clone();
        let tenants = Tenants::new(move |asked: &Namespace| {
            Err(OpsError::invalid(format!(
                "this server serves namespace {:?} only, not {:?}",
                refused.as_str(),
                asked.as_str()
            )))
        });
        {
            let mut state = tenants.state();
            state.served.insert(namespace.clone());
            state.services.insert(
                namespace,
                Entry {
                    service,
                    used: 0,
                    pinned: true,
                },
            );
        }
        tenants
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The namespaces served since start (open now or closed since), in order.
    pub fn served_namespaces(&self) -> Vec<Namespace> {
        self.state().served.iter().cloned().collect()
    }

    /// How many services are open now.
    pub fn open_count(&self) -> usize {
        self.state().services.len()
    }

    /// The service of `namespace`, opened now if it is not open (blocking). Opening one past
    /// the capacity closes the least recently used other (on this thread, after the lock is
    /// released: closing may checkpoint a file or stop an indexer).
    pub fn get(&self, namespace: &Namespace) -> Result<Service, OpsError> {
        if let Some(service) = self.get_open(namespace, true) {
            return Ok(service);
        }
        // Opened outside the lock: opening may wait on a database, and other namespaces'
        // requests must not wait for it. Two first requests may both open; one is kept.
        let opened = (self.open)(namespace)?;
        let (service, closed, spare) = {
            let mut state = self.state();
            state.tick += 1;
            let tick = state.tick;
            state.served.insert(namespace.clone());
            let (service, spare) = match state.services.entry(namespace.clone()) {
                // Opened by another first request meanwhile: that one is kept.
                std::collections::hash_map::Entry::Occupied(mut kept) => {
                    kept.get_mut().used = tick;
                    (kept.get().service.clone(), Some(opened))
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    let entry = slot.insert(Entry {
                        service: opened,
                        used: tick,
                        pinned: false,
                    });
                    (entry.service.clone(), None)
                }
            };
            let closed = self.over_capacity(&mut state, namespace);
            (service, closed, spare)
        };
        // Closed with the lock released.
        drop((closed, spare));
        Ok(service)
    }

    /// The service of `namespace` for a one-off task over many namespaces (the expiry sweep):
    /// the open one, left where it is in the order of use, or one opened for the caller alone
    /// and closed when it drops, so that the task does not close the services in use.
    pub fn get_transient(&self, namespace: &Namespace) -> Result<Service, OpsError> {
        match self.get_open(namespace, false) {
            Some(service) => Ok(service),
            None => (self.open)(namespace),
        }
    }

    /// The open service of `namespace`, marked used now if `touch`.
    fn get_open(&self, namespace: &Namespace, touch: bool) -> Option<Service> {
        let mut state = self.state();
        state.tick += 1;
        let tick = state.tick;
        let entry = state.services.get_mut(namespace)?;
        if touch {
            entry.used = tick;
        }
        Some(entry.service.clone())
    }

    /// Takes out the least recently used services past the capacity, never `keep` or a pinned
    /// one, for the caller to drop after releasing the lock.
    fn over_capacity(&self, state: &mut State, keep: &Namespace) -> Vec<Service> {
        let mut closed = Vec::new();
        while state.services.len() > self.capacity {
            let oldest = state
                .services
                .iter()
                .filter(|(namespace, entry)| !entry.pinned && *namespace != keep)
                .min_by_key(|(_, entry)| entry.used)
                .map(|(namespace, _)| namespace.clone());
            let Some(oldest) = oldest.and_then(|namespace| state.services.remove(&namespace))
            else {
                break;
            };
            closed.push(oldest.service);
        }
        closed
    }
}

impl Drop for Tenants {
    /// Drops the services on a thread of their own: a service may hold what must not be
    /// dropped on an async worker thread (where the server drops its routes when it stops),
    /// such as an OpenAI-compatible embedder's blocking HTTP client. (PostgreSQL pools close
    /// their connections safely there by themselves: `mnemon_db::postgres::Pool`.)
    fn drop(&mut self) {
        let services = std::mem::take(&mut self.state().services);
        if services.is_empty() {
            return;
        }
        let services: Vec<Service> = services.into_values().map(|e| e.service).collect();
        if tokio::runtime::Handle::try_current().is_ok() {
            // Joined, so the connections are closed when the server's run returns.
            let _ = std::thread::spawn(move || close_all(services)).join();
        } else {
            close_all(services);
        }
    }
}

/// Drops `services` on up to [`CLOSING_THREADS`] threads at once. A service's drop waits for
/// its background work to stop (a PostgreSQL memory's indexer ends the batch it is moving), and
/// one after another each waited behind the indexers of the namespaces not yet closed, still
/// moving rows through the pool they share: a server of 64 PostgreSQL namespaces took 8.5 s to
/// exit after SIGTERM, past a supervisor's stop timeout.
fn close_all(services: Vec<Service>) {
    let queue = Mutex::new(services);
    let threads = queue
        .lock()
        .map_or(1, |services| services.len().clamp(1, CLOSING_THREADS));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().unwrap_or_else(PoisonError::into_inner).pop();
                    match next {
                        Some(service) => drop(service),
                        None => break,
                    }
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Tenants opening each namespace's stores in one data directory, counting the opens.
    fn counted(dir: &std::path::Path) -> (Tenants, Arc<AtomicUsize>) {
        let opened = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&opened);
        let root = dir.to_path_buf();
        let tenants = Tenants::new(move |namespace: &Namespace| {
            counter.fetch_add(1, Ordering::SeqCst);
            let options = mnemon_ops::OpenOptions::default().with_namespace(namespace.clone());
            Ok(Service::new(
                mnemon_ops::Stores::open_with(&root, &options)
                    .map_err(|e| OpsError::invalid(e.to_string()))?,
            ))
        });
        (tenants, opened)
    }

    fn ns(name: &str) -> Namespace {
        name.parse().unwrap()
    }

    /// An embedder whose drop waits (up to 2 s) until `expected` of them are being dropped,
    /// and counts the drops that waited in vain.
    struct MeetingEmbedder {
        meeting: Arc<(Mutex<usize>, std::sync::Condvar)>,
        expected: usize,
        alone: Arc<AtomicUsize>,
    }

    impl mnemon_embed::Embedder for MeetingEmbedder {
        fn model(&self) -> &str {
            "meeting"
        }
        fn dimension(&self) -> usize {
            1
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, mnemon_embed::EmbedError> {
            Ok(texts.iter().map(|_| vec![1.0]).collect())
        }
    }

    impl Drop for MeetingEmbedder {
        fn drop(&mut self) {
            let (arrived, all_here) = &*self.meeting;
            let mut arrived = arrived.lock().unwrap();
            *arrived += 1;
            all_here.notify_all();
            let (arrived, waited) = all_here
                .wait_timeout_while(arrived, std::time::Duration::from_secs(30), |n| {
                    *n < self.expected
                })
                .unwrap();
            drop(arrived);
            if waited.timed_out() {
                self.alone.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// The server's stop closes its services at once, not one after another: each waits for
    /// its own background work, which (with PostgreSQL) ran on behind the others' closes.
    #[test]
    fn the_services_close_together() {
        let dir = tempfile::tempdir().unwrap();
        let meeting = Arc::new((Mutex::new(0), std::sync::Condvar::new()));
        let alone = Arc::new(AtomicUsize::new(0));
        let root = dir.path().to_path_buf();
        let (shared, lonely) = (Arc::clone(&meeting), Arc::clone(&alone));
        let tenants = Tenants::new(move |namespace: &Namespace| {
            let options = mnemon_ops::OpenOptions::default().with_namespace(namespace.clone());
            let stores = mnemon_ops::Stores::open_with(&root, &options)
                .map_err(|e| OpsError::invalid(e.to_string()))?;
            Ok(
                Service::new(stores).with_embedder(Arc::new(MeetingEmbedder {
                    meeting: Arc::clone(&shared),
                    expected: 4,
                    alone: Arc::clone(&lonely),
                })),
            )
        });
        for name in ["a", "b", "c", "d"] {
            tenants.get(&ns(name)).unwrap();
        }
        drop(tenants);
        assert_eq!(*meeting.0.lock().unwrap(), 4);
        assert_eq!(alone.load(Ordering::SeqCst), 0, "a service closed alone");
    }

    #[test]
    fn a_single_tenant_serves_its_namespace_only_and_others_open_once() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(mnemon_ops::Stores::open(dir.path()).unwrap());
        let single = Tenants::single(service);
        assert!(single.get(&Namespace::default()).is_ok());
        let refused = single.get(&ns("acme")).unwrap_err();
        assert!(refused.to_string().contains("acme"), "{refused}");

        let (many, opened) = counted(dir.path());
        assert_eq!(
            many.get(&ns("acme")).unwrap().stores().namespace(),
            &ns("acme")
        );
        many.get(&ns("acme")).unwrap();
        many.get(&Namespace::default()).unwrap();
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn past_the_capacity_the_least_recently_used_closes_and_reopens_on_use() {
        let dir = tempfile::tempdir().unwrap();
        let (mut tenants, opened) = counted(dir.path());
        tenants.set_capacity(2);
        tenants.get(&ns("a")).unwrap();
        tenants.get(&ns("b")).unwrap();
        tenants.get(&ns("a")).unwrap(); // `b` is now the least recently used
        tenants.get(&ns("c")).unwrap();
        assert_eq!(tenants.open_count(), 2);
        assert_eq!(opened.load(Ordering::SeqCst), 3);
        tenants.get(&ns("a")).unwrap();
        assert_eq!(opened.load(Ordering::SeqCst), 3, "`a` stayed open");
        tenants.get(&ns("b")).unwrap();
        assert_eq!(
            opened.load(Ordering::SeqCst),
            4,
            "`b` was closed and opened again"
        );
        assert_eq!(
            tenants.served_namespaces(),
            vec![ns("a"), ns("b"), ns("c")],
            "closed namespaces are still listed for the sweep"
        );
    }

    #[test]
    fn a_closed_service_in_use_keeps_working_and_its_data_stays() {
        let dir = tempfile::tempdir().unwrap();
        let (mut tenants, _) = counted(dir.path());
        tenants.set_capacity(1);
        let held = tenants.get(&ns("a")).unwrap();
        tenants.get(&ns("b")).unwrap(); // closes `a` in the map, not `held`
        assert_eq!(tenants.open_count(), 1);
        let session = held.stores().session("s").unwrap();
        let msg: mnemon_memory::MsgInput =
            serde_json::json!({"id": "m1", "name": "u", "content": "kept"}).into();
        session.add(vec![msg]).unwrap();
        drop((session, held));
        let reopened = tenants.get(&ns("a")).unwrap();
        assert_eq!(reopened.stores().session("s").unwrap().size().unwrap(), 1);
    }

    #[test]
    fn a_pinned_service_is_never_closed_and_a_sweep_does_not_reorder() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(mnemon_ops::Stores::open(dir.path()).unwrap());
        let mut single = Tenants::single(service);
        single.set_capacity(1);
        for _ in 0..3 {
            single.get(&Namespace::default()).unwrap();
        }
        assert_eq!(single.open_count(), 1);

        let (mut tenants, opened) = counted(dir.path());
        tenants.set_capacity(1);
        tenants.get(&ns("a")).unwrap();
        // The sweep's own open of `b` is not kept, and `a` stays open.
        tenants.get_transient(&ns("b")).unwrap();
        assert_eq!(opened.load(Ordering::SeqCst), 2);
        tenants.get(&ns("a")).unwrap();
        assert_eq!(opened.load(Ordering::SeqCst), 2);
        assert_eq!(tenants.open_count(), 1);
    }
}
