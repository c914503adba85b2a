//! Histories of concurrent clients, checked for linearizability (#23).
//!
//! Client threads read, write and compare-and-set a few variables (`/v1/var/hist/k<n>`) through
//! any server for the whole fault run, and record every operation: when it was invoked, when it
//! returned, and what it returned — ok (with the value read or written), or unknown (a timeout, a
//! 5xx, a refused connection: it may or may not have taken effect). `histcheck::check` (shared
//! with the deterministic simulation) then looks for an order of the operations, one per key,
//! that respects real time and explains every result by a single register.
//!
//! Every value written is unique, so a compare-and-set by `ModifyIndex` is a compare-and-set by
//! value: the index a client holds came with exactly one value.

pub use histcheck::{check, tally, with_stale_read, Call, Op, Ret};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The recorded history.
#[derive(Clone, Default)]
pub struct History(Arc<Mutex<Vec<Op>>>);

impl History {
    pub fn ops(&self) -> Vec<Op> {
        self.0.lock().unwrap().clone()
    }
}

/// Client threads making operations until dropped.
pub struct Workers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub history: History,
}

/// Where the workers send their requests: the servers' HTTP addresses, read afresh each call (a
/// restarted server keeps its address).
pub type Targets = Arc<Vec<String>>;

const KEYS: usize = 2;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

impl Workers {
    pub fn start(clients: usize, servers: Targets, seed: u64) -> Workers {
        let stop = Arc::new(AtomicBool::new(false));
        let history = History::default();
        let begin = Instant::now();
        let threads = (0..clients)
            .map(|c| {
                let (stop, history, servers) = (stop.clone(), history.clone(), servers.clone());
                std::thread::spawn(move || {
                    worker(
                        c,
                        &servers,
                        &stop,
                        &history,
                        begin,
                        seed.wrapping_add(c as u64),
                    );
                })
            })
            .collect();
        Workers {
            stop,
            threads,
            history,
        }
    }

    pub fn stop(mut self) -> History {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.history.clone()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A small xorshift: the workers' choices follow the seed (their timing does not).
fn next(r: &mut u64) -> u64 {
    *r ^= *r << 13;
    *r ^= *r >> 7;
    *r ^= *r << 17;
    *r
}

fn worker(
    me: usize,
    servers: &[String],
    stop: &AtomicBool,
    history: &History,
    begin: Instant,
    seed: u64,
) {
    let mut rng = seed | 1;
    let mut seq = 0u64;
    // What this client last saw of each key: value and ModifyIndex (0: absent).
    let mut known: HashMap<String, (Option<String>, u64)> = HashMap::new();
    let now = || u64::try_from(begin.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
    while !stop.load(Ordering::Relaxed) {
        let key = format!("k{}", next(&mut rng) % KEYS as u64);
        let addr = &servers[usize::try_from(next(&mut rng) % servers.len() as u64).unwrap_or(0)];
        let path = format!("/v1/var/hist/{key}");
        let choice = next(&mut rng) % 3;
        seq += 1;
        let value = format!("c{me}-{seq}");
        let invoke = now();
        let (call, ret, index) = match choice {
            0 => {
                let r = super::http("GET", addr, &path, None, REQUEST_TIMEOUT);
                let (ret, index) = match r {
                    Ok((200, body)) => {
                        let v: Value = serde_json::from_str(&body).unwrap_or_default();
                        (Ret::Ok(item(&v)), v["ModifyIndex"].as_u64())
                    }
                    Ok((404, _)) => (Ret::Ok(None), Some(0)),
                    _ => (Ret::Unknown, None),
                };
                (Call::Read, ret, index)
            }
            1 => {
                let body = json!({"Items": {"v": value}});
                let r = super::http("PUT", addr, &path, Some(&body), REQUEST_TIMEOUT);
                let (ret, index) = match r {
                    Ok((200, body)) => {
                        let v: Value = serde_json::from_str(&body).unwrap_or_default();
                        (Ret::Ok(Some(value.clone())), v["ModifyIndex"].as_u64())
                    }
                    _ => (Ret::Unknown, None),
                };
                (Call::Write(value.clone()), ret, index)
            }
            _ => {
                let (expect, cas) = known.get(&key).cloned().unwrap_or((None, 0));
                let body = json!({"Items": {"v": value}});
                let r = super::http(
                    "PUT",
                    addr,
                    &format!("{path}?cas={cas}"),
                    Some(&body),
                    REQUEST_TIMEOUT,
                );
                let (ret, index) = match r {
                    Ok((200, body)) => {
                        let v: Value = serde_json::from_str(&body).unwrap_or_default();
                        (Ret::Ok(Some(value.clone())), v["ModifyIndex"].as_u64())
                    }
                    Ok((409, body)) => {
                        let v: Value = serde_json::from_str(&body).unwrap_or_default();
                        let index = v["ModifyIndex"].as_u64().unwrap_or(0);
                        let seen = if index == 0 { None } else { item(&v) };
                        (Ret::CasFailed(seen), Some(index))
                    }
                    _ => (Ret::Unknown, None),
                };
                (
                    Call::Cas {
                        expect,
                        new: value.clone(),
                    },
                    ret,
                    index,
                )
            }
        };
        let done = if ret == Ret::Unknown { u64::MAX } else { now() };
        match (&ret, index) {
            (Ret::Ok(v) | Ret::CasFailed(v), Some(i)) => {
                known.insert(key.clone(), (v.clone(), i));
            }
            (Ret::Unknown, _) => {
                known.remove(&key);
            }
            _ => {}
        }
        history.0.lock().unwrap().push(Op {
            client: me,
            key,
            call,
            ret,
            invoke,
            done,
        });
        std::thread::sleep(Duration::from_millis(10 + next(&mut rng) % 40));
    }
}

fn item(v: &Value) -> Option<String> {
    v["Items"]["v"].as_str().map(str::to_string)
}

/// Writes the history to `path`, one operation per line in invocation order, for a failure's
/// post-mortem.
pub fn dump(ops: &[Op], path: &std::path::Path) {
    let mut sorted = ops.to_vec();
    sorted.sort_by_key(|o| (o.key.clone(), o.invoke));
    let text: Vec<String> = sorted
        .iter()
        .map(|o| {
            let done = if o.done == u64::MAX {
                "?".to_string()
            } else {
                format!("{:.3}", o.done as f64 / 1e6)
            };
            format!(
                "{} c{} [{:.3} ms .. {done} ms] {:?} -> {:?}",
                o.key,
                o.client,
                o.invoke as f64 / 1e6,
                o.call,
                o.ret
            )
        })
        .collect();
    let _ = std::fs::write(path, text.join("\n"));
}
