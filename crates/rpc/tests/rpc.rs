//! The transport on loopback: real sockets, port-0 listeners.

use rpc::{serve, BoxFuture, Client, ErrorCode, Handler, Method, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};

/// Echo: returns its body. Sleep: waits `body` milliseconds, then returns it. Hang: signals
/// `entered`, then never answers. Fail: answers `NotFound`. Anything else: `NotFound` too.
#[derive(Default)]
struct TestHandler {
    entered: Arc<Notify>,
    /// Set when a `Test.Hang` handler is dropped (cancelled).
    dropped: Arc<Notify>,
}

/// Notifies when dropped.
struct OnDrop(Arc<Notify>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// Calls `method` with a JSON-shaped body (MessagePack on the wire) and decodes the answer.
async fn call_value(
    client: &Client,
    addr: &str,
    method: &str,
    body: Value,
) -> Result<Value, RpcError> {
    let body = rpc::codec::encode(&body).unwrap();
    let answer = client.call_raw(addr, method, &body).await?;
    Ok(rpc::codec::decode(&answer).unwrap())
}

impl Handler for TestHandler {
    fn handle(
        &self,
        _peer: &rpc::Peer,
        method: String,
        body: Vec<u8>,
    ) -> BoxFuture<'static, Result<Vec<u8>, RpcError>> {
        let entered = self.entered.clone();
        let dropped = self.dropped.clone();
        Box::pin(async move {
            let body: Value =
                rpc::codec::decode(&body).map_err(|e| RpcError::bad_request(e.to_string()))?;
            let answer = handle_value(&method, body, entered, dropped).await?;
            Ok(rpc::codec::encode(&answer).unwrap())
        })
    }
}

async fn handle_value(
    method: &str,
    body: Value,
    entered: Arc<Notify>,
    dropped: Arc<Notify>,
) -> Result<Value, RpcError> {
    {
        {
            match method {
                "Test.Hang" => {
                    let _cancelled = OnDrop(dropped);
                    entered.notify_one();
                    std::future::pending().await
                }
                "Test.Echo" => Ok(body),
                "Test.Sleep" => {
                    let ms = body.as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(body)
                }
                "Test.Fail" => Err(RpcError::not_found("no such job \"web\"")),
                other => Err(RpcError::not_found(format!("unknown method {other}"))),
            }
        }
    }
}

struct Server {
    addr: String,
    entered: Arc<Notify>,
    dropped: Arc<Notify>,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        let handler = TestHandler::default();
        let entered = handler.entered.clone();
        let dropped = handler.dropped.clone();
        let done = tokio::spawn(serve(listener, Arc::new(handler), async {
            let _ = stopped.await;
        }));
        Server {
            addr,
            entered,
            dropped,
            stop: Some(stop),
            done,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.done.await.unwrap();
    }
}

struct Echo;

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct EchoMsg {
    text: String,
    n: u32,
}

impl Method for Echo {
    const NAME: &'static str = "Test.Echo";
    type Request = EchoMsg;
    type Response = EchoMsg;
}

#[tokio::test]
async fn echo_round_trips_a_typed_request() {
    let server = Server::start().await;
    let client = Client::new(Duration::from_secs(5));
    let req = EchoMsg {
        text: "hello".into(),
        n: 7,
    };
    let resp = client.call::<Echo>(&server.addr, &req).await.unwrap();
    assert_eq!(resp, req);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_share_one_connection_and_may_finish_out_of_order() {
    let server = Server::start().await;
    let client = Client::new(Duration::from_secs(20));
    let mut calls = Vec::new();
    for i in 0..500u64 {
        let client = client.clone();
        let addr = server.addr.clone();
        calls.push(tokio::spawn(async move {
            // Earlier calls sleep longer, so answers come back in reverse order.
            let ms = (500 - i) / 25;
            let got = call_value(&client, &addr, "Test.Sleep", json!(ms))
                .await
                .unwrap();
            assert_eq!(got, json!(ms));
            i
        }));
    }
    for (i, call) in calls.into_iter().enumerate() {
        assert_eq!(call.await.unwrap(), i as u64);
    }
    server.stop().await;
}

#[tokio::test]
async fn an_error_code_survives_the_wire() {
    let server = Server::start().await;
    let client = Client::new(Duration::from_secs(5));
    let err = call_value(&client, &server.addr, "Test.Fail", Value::Null)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    assert_eq!(err.message, "no such job \"web\"");
    assert_eq!(err.to_string(), "not found: no such job \"web\"");
    server.stop().await;
}

#[tokio::test]
async fn a_server_that_is_gone_is_unavailable_and_the_client_redials_when_it_is_back() {
    let server = Server::start().await;
    let addr = server.addr.clone();
    let client = Client::new(Duration::from_secs(5));
    call_value(&client, &addr, "Test.Echo", json!(1))
        .await
        .unwrap();
    server.stop().await;

    let err = call_value(&client, &addr, "Test.Echo", json!(2))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable, "{err}");
    let err = call_value(&client, &addr, "Test.Echo", json!(3))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable, "{err}");

    // A server on the same address again: the broken connection is replaced.
    let listener = TcpListener::bind(&addr).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(serve(listener, Arc::new(TestHandler::default()), async {
        let _ = stopped.await;
    }));
    assert_eq!(
        call_value(&client, &addr, "Test.Echo", json!(4))
            .await
            .unwrap(),
        json!(4)
    );
    let _ = stop.send(());
    done.await.unwrap();
}

#[tokio::test]
async fn pending_calls_fail_unavailable_when_the_server_stops() {
    let server = Server::start().await;
    let addr = server.addr.clone();
    let client = Client::new(Duration::from_secs(30));
    call_value(&client, &addr, "Test.Echo", json!(0))
        .await
        .unwrap();
    let slow = {
        let client = client.clone();
        let addr = addr.clone();
        tokio::spawn(async move { call_value(&client, &addr, "Test.Hang", Value::Null).await })
    };
    // Stop the server once the call is running there.
    tokio::time::timeout(Duration::from_secs(5), server.entered.notified())
        .await
        .expect("the call reaches the handler");
    server.stop().await;
    let err = slow.await.unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable, "{err}");
}

#[tokio::test]
async fn a_slow_handler_times_out_and_the_connection_stays_usable() {
    let server = Server::start().await;
    let client = Client::new(Duration::from_millis(200));
    let err = call_value(&client, &server.addr, "Test.Hang", Value::Null)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Timeout, "{err}");
    assert_eq!(
        call_value(&client, &server.addr, "Test.Echo", json!("after"))
            .await
            .unwrap(),
        json!("after")
    );
    server.stop().await;
}

/// A caller that stops waiting takes the handler with it: the server cancels a handler once the
/// caller's timeout (sent with the request) has passed, so work nobody waits for — a request
/// queued behind a busy plugin, say — does not pile up behind the caller's retries.
#[tokio::test]
async fn a_handler_whose_caller_stopped_waiting_is_cancelled() {
    let server = Server::start().await;
    let client = Client::new(Duration::from_millis(200));
    let err = call_value(&client, &server.addr, "Test.Hang", Value::Null)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Timeout, "{err}");
    tokio::time::timeout(Duration::from_secs(10), server.dropped.notified())
        .await
        .expect("the server cancelled the handler");
    server.stop().await;
}

#[tokio::test]
async fn an_oversized_request_is_refused_before_it_is_sent() {
    let server = Server::start().await;
    let client = Client::new(Duration::from_secs(30));
    let huge = "x".repeat(rpc::limits::FRAME_BYTES_MAX);
    let err = call_value(&client, &server.addr, "Test.Echo", json!(huge))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::BadRequest, "{err}");
    // The connection is untouched.
    assert_eq!(
        call_value(&client, &server.addr, "Test.Echo", json!(5))
            .await
            .unwrap(),
        json!(5)
    );
    server.stop().await;
}

#[tokio::test]
async fn the_server_drops_a_connection_that_announces_an_oversized_frame() {
    let server = Server::start().await;
    let mut raw = TcpStream::connect(&server.addr).await.unwrap();
    let len = u32::try_from(rpc::limits::FRAME_BYTES_MAX + 1).unwrap();
    raw.write_all(&len.to_be_bytes()).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut buf))
        .await
        .expect("server closes promptly")
        .unwrap_or(0);
    assert_eq!(n, 0, "server answered instead of closing");
    server.stop().await;
}

#[tokio::test]
async fn a_malformed_request_with_an_id_gets_bad_request() {
    let server = Server::start().await;
    let mut raw = TcpStream::connect(&server.addr).await.unwrap();
    let body = rpc::codec::encode(&json!({"id": 9, "method": 17})).unwrap();
    let body = &body[..];
    raw.write_all(&(body.len() as u32).to_be_bytes())
        .await
        .unwrap();
    raw.write_all(body).await.unwrap();
    let mut len = [0u8; 4];
    raw.read_exact(&mut len).await.unwrap();
    let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
    raw.read_exact(&mut frame).await.unwrap();
    let resp: Value = rpc::codec::decode(&frame).unwrap();
    assert_eq!(resp["id"], json!(9));
    assert_eq!(resp["result"]["Err"]["code"], json!("BadRequest"));
    server.stop().await;
}

#[tokio::test]
async fn an_unreachable_address_is_unavailable() {
    // Bind and drop a listener to find a port nobody serves.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().to_string()
    };
    let client = Client::new(Duration::from_secs(5));
    let err = call_value(&client, &addr, "Test.Echo", json!(1))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable, "{err}");
}
