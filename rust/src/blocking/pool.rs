//! The keeper threads of held locks, reused.
//!
//! Every held lock needs a thread of its own (it sits in a blocking read
//! between heartbeats), but a thread need not be new: starting one costs
//! more than a whole acquire and release on a loopback server (the stack
//! and signal stack mapped and unmapped, the clone, the exit). A keeper
//! whose lock ended waits here for the next lock, for [`IDLE`] at most,
//! then exits. There are never more threads than locks held at once
//! during the last [`IDLE`].

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::monitor::Monitor;

/// How long an idle keeper thread waits for the next lock before exiting.
const IDLE: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

/// The idle threads and the jobs handed to them.
struct Pool {
    state: Mutex<Idle>,
    work: Condvar,
}

struct Idle {
    /// Jobs handed to idle threads and not yet picked up.
    queue: VecDeque<Job>,
    /// Threads waiting for a job, less the jobs queued for them.
    idle: usize,
}

static POOL: Pool = Pool {
    state: Mutex::new(Idle {
        queue: VecDeque::new(),
        idle: 0,
    }),
    work: Condvar::new(),
};

impl Pool {
    fn lock(&self) -> MutexGuard<'_, Idle> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A job running on a keeper thread: [`Task::join`] waits for its end.
pub(crate) struct Task {
    done: Arc<Monitor<bool>>,
}

/// Marks the job's end when dropped: after the job returned, or while a
/// panic unwinds its thread.
struct Finish(Arc<Monitor<bool>>);

impl Drop for Finish {
    fn drop(&mut self) {
        *self.0.lock() = true;
        self.0.notify_all();
    }
}

/// Runs `job` on an idle keeper thread, or on a new one (named `name`)
/// when none is idle.
pub(crate) fn spawn(name: &str, job: impl FnOnce() + Send + 'static) -> io::Result<Task> {
    let done = Arc::new(Monitor::new(false));
    let finish = Finish(Arc::clone(&done));
    let job: Job = Box::new(move || {
        // Dropped last, once everything the job owned is dropped.
        let _finish = finish;
        job();
    });
    let mut state = POOL.lock();
    if state.idle > 0 {
        state.idle -= 1;
        state.queue.push_back(job);
        drop(state);
        POOL.work.notify_one();
    } else {
        drop(state);
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || work(job))?;
    }
    Ok(Task { done })
}

/// A keeper thread: runs its job, then the next ones handed to it while it
/// waits idle, until it has waited [`IDLE`] for nothing.
fn work(mut job: Job) {
    loop {
        job();
        let mut state = POOL.lock();
        state.idle += 1;
        job = loop {
            if let Some(next) = state.queue.pop_front() {
                // The submitter counted this thread busy already.
                break next;
            }
            let (next, waited) = POOL
                .work
                .wait_timeout(state, IDLE)
                .unwrap_or_else(PoisonError::into_inner);
            state = next;
            if waited.timed_out() && state.queue.is_empty() {
                state.idle -= 1;
                return;
            }
        };
    }
}

impl Task {
    /// Waits until the job has ended, but no later than `until`; whether it
    /// has.
    pub(crate) fn join_until(&self, until: Instant) -> bool {
        *self
            .done
            .wait_while_until(self.done.lock(), Some(until), |done| !*done)
    }

    /// Waits until the job has ended.
    pub(crate) fn join(&self) {
        drop(
            self.done
                .wait_while_until(self.done.lock(), None, |done| !*done),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn jobs_run_and_join_waits_for_them() {
        let ran = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<Task> = (0..20)
            .map(|_| {
                let ran = Arc::clone(&ran);
                spawn("monolock test", move || {
                    std::thread::sleep(Duration::from_millis(5));
                    ran.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap()
            })
            .collect();
        for task in &tasks {
            task.join();
        }
        assert_eq!(ran.load(Ordering::SeqCst), 20);
        // Idle threads take the next jobs.
        for _ in 0..50 {
            let ran = Arc::clone(&ran);
            spawn("monolock test", move || {
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap()
            .join();
        }
        assert_eq!(ran.load(Ordering::SeqCst), 70);
    }

    #[test]
    fn join_until_gives_up_at_the_bound() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let task = spawn("monolock test", move || {
            let _ = rx.recv();
        })
        .unwrap();
        assert!(!task.join_until(Instant::now() + Duration::from_millis(20)));
        drop(tx);
        assert!(task.join_until(Instant::now() + Duration::from_secs(10)));
    }

    #[test]
    fn a_panicking_job_still_ends() {
        let task = spawn("monolock test", || panic!("expected by the test")).unwrap();
        task.join();
    }
}
