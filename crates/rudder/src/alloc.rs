//! The process's allocator, chosen by what the process is. `rudder server`
//! (the control plane) allocates with mimalloc: the API server's JSON trees
//! are many small allocations, and glibc's malloc spent a quarter of its
//! CPU on them (mimalloc made the scheduler benchmark 1.3–2.3× faster, see
//! docs/benchmarks.md). Every other subcommand — `rudder agent` above all,
//! whose memory is a figure of its own (under 40 MiB with 100 pods) and
//! which mimalloc's per-thread pages grew by half — keeps the system's.
//!
//! The choice is made once, at the process's first allocation, from its
//! first argument read out of `/proc/self/cmdline` into a buffer on the
//! stack, so that nothing is ever freed by the allocator that did not
//! allocate it.

#![allow(unsafe_code)] // GlobalAlloc is an unsafe trait: each call passes its arguments through.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

use mimalloc::MiMalloc;

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const MIMALLOC: u8 = 2;

/// The allocator `rudder` registers; see the module's documentation.
#[derive(Debug)]
pub struct Allocator;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Whether this process is `rudder server`, allocating nothing to know.
fn is_server() -> bool {
    use rustix::fs::{Mode, OFlags, open};
    let Ok(fd) = open(
        c"/proc/self/cmdline",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let mut buffer = [0u8; 512];
    let read = rustix::io::read(&fd, &mut buffer).unwrap_or(0);
    let mut arguments = buffer[..read].split(|b| *b == 0);
    arguments.next(); // the program
    arguments.next() == Some(b"server".as_slice())
}

fn choice() -> u8 {
    match CHOICE.load(Ordering::Relaxed) {
        UNDECIDED => {
            // The first allocation happens on the main thread before any
            // other thread exists; a race would only decide the same.
            let chosen = if is_server() { MIMALLOC } else { SYSTEM };
            CHOICE.store(chosen, Ordering::Relaxed);
            chosen
        }
        chosen => chosen,
    }
}

unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe {
            match choice() {
                MIMALLOC => MiMalloc.alloc(layout),
                _ => System.alloc(layout),
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for alloc.
        unsafe {
            match choice() {
                MIMALLOC => MiMalloc.alloc_zeroed(layout),
                _ => System.alloc_zeroed(layout),
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from the same allocator: the choice never
        // changes once made, and nothing is allocated before it.
        unsafe {
            match choice() {
                MIMALLOC => MiMalloc.dealloc(ptr, layout),
                _ => System.dealloc(ptr, layout),
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for dealloc.
        unsafe {
            match choice() {
                MIMALLOC => MiMalloc.realloc(ptr, layout, new_size),
                _ => System.realloc(ptr, layout, new_size),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_process_is_not_the_server_and_keeps_its_choice() {
        assert!(!is_server());
        let first = choice();
        assert_eq!(first, SYSTEM);
        let v: Vec<u64> = (0..1000).collect();
        assert_eq!(v.iter().sum::<u64>(), 499_500);
        assert_eq!(choice(), first);
    }
}
