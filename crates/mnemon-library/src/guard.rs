//! Surviving files that change under a memory map (issue 11 item 5).
//!
//! A library JSON is mapped while it loads and a packed sidecar stays mapped while it is served.
//! When such a file is truncated (`cp` over it truncates before it writes: an ordinary deploy),
//! touching a mapped page past the new end raises SIGBUS, whose default action ends the process.
//! Reading the files into memory the process owns would avoid that, but costs what the maps
//! were for: a sidecar of 100,000 × 1536 would take hundreds of milliseconds to open instead of
//! milliseconds, and a JSON load would hold the file and the matrix at once.
//!
//! So the maps are kept and guarded. [`register`] records a mapped range in a fixed table and,
//! the first time, installs a process-wide SIGBUS handler. For a fault inside a registered
//! range the handler maps an anonymous zero page over the faulting page (`mmap` with
//! `MAP_FIXED | MAP_ANONYMOUS`), marks the range damaged and returns: the access is retried and
//! reads zeros. Callers check [`Guard::damaged`] after they used the bytes (a load fails, a
//! query is refused) so zeros never reach a result as data. A fault anywhere else goes to the
//! handler that was installed before (or to the default action, which ends the process exactly
//! as it would have without this module).
//!
//! A same-size in-place rewrite raises no fault at all; the sidecar owner therefore also
//! compares the mapped file's size and modification time with those it had when mapped.
//!
//! Only Linux is guarded (the handler needs `si_addr`); elsewhere, or when the table is full,
//! [`register`] returns `None` and callers read the file into memory they own instead.

/// A registered range; unregistered on drop, which must happen before the range is unmapped.
pub(crate) struct Guard {
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    slot: usize,
}

impl Guard {
    /// Whether a page of the range faulted (the file shrank under it) and now reads as zeros.
    pub(crate) fn damaged(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            imp::damaged(self.slot)
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        imp::unregister(self.slot);
    }
}

/// Guards `len` bytes mapped at `start` (page-aligned, as every map is); `None` when the
/// platform is not guarded or every slot is taken.
pub(crate) fn register(start: *const u8, len: usize) -> Option<Guard> {
    #[cfg(target_os = "linux")]
    {
        imp::register(start as usize, len).map(|slot| Guard { slot })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (start, len);
        None
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

    /// Ranges guarded at once: a served library holds one sidecar, a reload a second, a JSON
    /// load one more; a directory of sidecars is copied into memory file by file.
    const SLOTS: usize = 64;
    const FREE: u8 = 0;
    const CLAIMED: u8 = 1;
    const ACTIVE: u8 = 2;

    struct Slot {
        state: AtomicU8,
        start: AtomicUsize,
        len: AtomicUsize,
        damaged: AtomicBool,
    }

    static TABLE: [Slot; SLOTS] = [const {
        Slot {
            state: AtomicU8::new(FREE),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            damaged: AtomicBool::new(false),
        }
    }; SLOTS];

    static PAGE: AtomicUsize = AtomicUsize::new(4096);
    /// The SIGBUS disposition found at installation, for faults outside guarded ranges.
    static PREVIOUS: OnceLock<Option<libc::sigaction>> = OnceLock::new();

    /// Installs the handler once; whether it is in place.
    fn install() -> bool {
        let previous = PREVIOUS.get_or_init(|| {
            // SAFETY: sysconf has no preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            if let Ok(page) = usize::try_from(page)
                && page.is_power_of_two()
            {
                PAGE.store(page, Ordering::SeqCst);
            }
            // SAFETY: a zeroed sigaction is a valid value; `sigaction` reads `action` and
            // writes `old`, both valid for the call. The handler has the three-argument
            // signature SA_SIGINFO requires.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_sigbus as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
                libc::sigemptyset(&mut action.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, &action, &mut old) == 0 {
                    Some(old)
                } else {
                    None
                }
            }
        });
        previous.is_some()
    }

    pub(super) fn register(start: usize, len: usize) -> Option<usize> {
        if len == 0 || !install() {
            return None;
        }
        for (i, slot) in TABLE.iter().enumerate() {
            if slot
                .state
                .compare_exchange(FREE, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                slot.start.store(start, Ordering::SeqCst);
                slot.len.store(len, Ordering::SeqCst);
                slot.damaged.store(false, Ordering::SeqCst);
                slot.state.store(ACTIVE, Ordering::SeqCst);
                return Some(i);
            }
        }
        None
    }

    pub(super) fn damaged(slot: usize) -> bool {
        TABLE
            .get(slot)
            .is_some_and(|s| s.damaged.load(Ordering::SeqCst))
    }

    pub(super) fn unregister(slot: usize) {
        if let Some(s) = TABLE.get(slot) {
            s.state.store(FREE, Ordering::SeqCst);
        }
    }

    /// The SIGBUS handler. Only async-signal-safe work: atomic loads and stores, `mmap`, and
    /// `sigaction` or the previous handler for faults that are not ours.
    extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let addr = if info.is_null() {
            0
        } else {
            // SAFETY: the kernel passes a valid siginfo_t for SA_SIGINFO handlers.
            unsafe { (*info).si_addr() as usize }
        };
        let page = PAGE.load(Ordering::Relaxed);
        for slot in &TABLE {
            if slot.state.load(Ordering::SeqCst) != ACTIVE {
                continue;
            }
            let start = slot.start.load(Ordering::SeqCst);
            let len = slot.len.load(Ordering::SeqCst);
            if addr < start || addr - start >= len {
                continue;
            }
            let base = addr & !(page - 1);
            // SAFETY: `base..base + page` lies inside a read-only file map this process
            // registered and has not unmapped (it unregisters first); replacing that page
            // with an anonymous zero page changes only what later reads of it return, which
            // the owner learns through `damaged`.
            let mapped = unsafe {
                libc::mmap(
                    base as *mut libc::c_void,
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if mapped != libc::MAP_FAILED {
                slot.damaged.store(true, Ordering::SeqCst);
                return;
            }
        }
        // Not ours: what would have happened without this handler.
        // SAFETY: `previous` is the disposition the kernel gave us at installation; a handler
        // is called with the signature its SA_SIGINFO flag says it has.
        unsafe {
            match PREVIOUS.get() {
                Some(Some(previous))
                    if previous.sa_sigaction != libc::SIG_DFL
                        && previous.sa_sigaction != libc::SIG_IGN =>
                {
                    if previous.sa_flags & libc::SA_SIGINFO != 0 {
                        let handler: extern "C" fn(
                            libc::c_int,
                            *mut libc::siginfo_t,
                            *mut libc::c_void,
                        ) = std::mem::transmute(previous.sa_sigaction);
                        handler(sig, info, ctx);
                    } else {
                        let handler: extern "C" fn(libc::c_int) =
                            std::mem::transmute(previous.sa_sigaction);
                        handler(sig);
                    }
                }
                _ => {
                    // Back to the default action; returning retries the access, which faults
                    // again and ends the process with SIGBUS as before.
                    let mut default: libc::sigaction = std::mem::zeroed();
                    default.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
                }
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;

    /// A mapped file truncated under the map: reading past the new end no longer kills the
    /// process; the range is reported damaged and reads zeros.
    #[test]
    fn a_truncated_map_reads_zeros_and_is_marked_damaged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&[7u8; 3 * 4096])
            .unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: test map of a private temporary file.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        let guard = register(map.as_ptr(), map.len()).unwrap();
        assert_eq!(map[8000], 7);
        assert!(!guard.damaged());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        let read = std::hint::black_box(&map[..])[8000];
        assert_eq!(read, 0);
        assert!(guard.damaged());
        drop(guard);
    }
}
