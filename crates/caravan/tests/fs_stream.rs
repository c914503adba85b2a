//! `/v1/client/fs/stream/:alloc`: a file of an allocation as Nomad's stream frames (or plain),
//! followed as it grows; a missing file is a 400, as Nomad's streaming errors.

mod common;

use base64::Engine;
use common::{call, json_of, temp_dir, wait_for, Agent};
use serde_json::json;
use std::io::{Read, Write};
use std::time::Duration;

/// The `Data` of every frame in `body`, decoded and joined, and the frames' file events.
fn frames(body: &str) -> (String, Vec<String>) {
    let mut data = Vec::new();
    let mut events = Vec::new();
    for frame in serde_json::Deserializer::from_str(body).into_iter::<serde_json::Value>() {
        let frame = frame.expect("a JSON frame");
        if let Some(d) = frame["Data"].as_str().filter(|d| !d.is_empty()) {
            data.extend(base64::engine::general_purpose::STANDARD.decode(d).unwrap());
        }
        if let Some(e) = frame["FileEvent"].as_str().filter(|e| !e.is_empty()) {
            events.push(e.to_string());
        }
    }
    (String::from_utf8_lossy(&data).into_owned(), events)
}

#[test]
fn a_file_is_streamed_and_followed() {
    let dir = temp_dir("fs-stream");
    let data = dir.join("data");
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data.display().to_string()]);
    let job = json!({"Job": {"ID": "writer", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c",
                "echo hello > \"$NOMAD_ALLOC_DIR/data/out.txt\"; exec sleep 300"]},
            "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}});
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&job));
    assert_eq!(s, 200, "{b}");
    let mut alloc = String::new();
    wait_for(
        "the file is written",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let (_, b) = call(&agent, "GET", "/v1/job/writer/allocations", "", None);
            let Some(id) = json_of(&b)[0]["ID"].as_str().map(String::from) else {
                return false;
            };
            alloc = id;
            let (s, b) = call(
                &agent,
                "GET",
                &format!("/v1/client/fs/cat/{alloc}?path=alloc/data/out.txt"),
                "",
                None,
            );
            s == 200 && b == "hello\n"
        },
    );
    let path = "alloc/data/out.txt";
    // Not followed: what is there, as frames, then the end.
    let (s, b) = call(
        &agent,
        "GET",
        &format!("/v1/client/fs/stream/{alloc}?path={path}&follow=false"),
        "",
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(frames(&b).0, "hello\n");
    let (s, b) = call(
        &agent,
        "GET",
        &format!(
            "/v1/client/fs/stream/{alloc}?path={path}&follow=false&plain=true&offset=2&origin=end"
        ),
        "",
        None,
    );
    assert_eq!((s, b.as_str()), (200, "o\n"));
    // A missing file: 400.
    let (s, b) = call(
        &agent,
        "GET",
        &format!("/v1/client/fs/stream/{alloc}?path=alloc/nope&follow=false"),
        "",
        None,
    );
    assert_eq!(s, 400, "{b}");

    // Followed: what is appended arrives, then its deletion ends the stream.
    let host = agent.http.trim_start_matches("http://").to_string();
    let mut conn = std::net::TcpStream::connect(&host).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    write!(conn, "GET /v1/client/fs/stream/{alloc}?path={path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let file = data.join("client/alloc").join(&alloc).join(path);
    assert!(file.exists(), "{}", file.display());
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let mut appended = false;
    let mut removed = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&got)
        );
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        let text = String::from_utf8_lossy(&got);
        if !appended && text.contains("\r\n\r\n") {
            std::fs::OpenOptions::new()
                .append(true)
                .open(&file)
                .unwrap()
                .write_all(b"more\n")
                .unwrap();
            appended = true;
        }
        if appended
            && !removed
            && text.contains(&base64::engine::general_purpose::STANDARD.encode("more\n"))
        {
            std::fs::remove_file(&file).unwrap();
            removed = true;
        }
        if text.contains("file deleted") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(removed, "the appended bytes arrived: {text}");
    assert!(text.contains("file deleted"), "{text}");
}
