//! Frames on the wire: a 4-byte big-endian length, then that many bytes of MessagePack
//! ([`crate::codec`]).
//!
//! A request frame is the map `{id, method, body, timeout_ms?, auth?}`; a response frame is
//! `{id, result}` where `result` is `{"Ok": body}` or `{"Err": {code, message}}`. A body is the
//! request's or answer's own MessagePack, carried as bytes, so the serving side reads the
//! envelope first and the endpoint decodes its body straight into its typed request. Ids are
//! chosen by the client and only need to be unique among one connection's pending calls.

use crate::error::RpcError;
use crate::limits::{FRAME_BYTES_MAX, READ_CHUNK_BYTES};
use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt};

const LEN_BYTES: usize = 4;

#[derive(Serialize)]
pub(crate) struct RequestOut<'a> {
    pub id: u64,
    pub method: &'a str,
    #[serde(with = "serde_bytes")]
    pub body: &'a [u8],
    /// How long the caller waits for the answer, from when it sent the request: the server
    /// cancels the handler past it, since nobody is left to read its answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// What the caller proves about itself (servers: the cluster's shared secret).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<&'a str>,
}

#[derive(Deserialize)]
pub(crate) struct RequestIn {
    pub id: u64,
    pub method: String,
    #[serde(default)]
    pub body: ByteBuf,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub auth: Option<String>,
}

/// Just the id of a request frame that failed to decode, so it can still be answered.
#[derive(Deserialize)]
pub(crate) struct IdOnly {
    pub id: u64,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Response {
    pub id: u64,
    pub result: Result<ByteBuf, RpcError>,
}

/// Why a frame could not be produced or read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("frame of {bytes} bytes exceeds the {max}-byte limit")]
    TooLarge { bytes: usize, max: usize },
    #[error("encoding frame: {0}")]
    Encode(crate::codec::CodecError),
    #[error("connection closed")]
    Closed,
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error("reading: {0}")]
    Io(#[from] io::Error),
}

/// Encodes `msg` as one frame (length prefix included).
pub(crate) fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut buf = vec![0u8; LEN_BYTES];
    crate::codec::encode_into(&mut buf, msg).map_err(FrameError::Encode)?;
    let len = buf.len() - LEN_BYTES;
    if len > FRAME_BYTES_MAX {
        return Err(FrameError::TooLarge {
            bytes: len,
            max: FRAME_BYTES_MAX,
        });
    }
    let len_be = u32::try_from(len)
        .expect("FRAME_BYTES_MAX fits in u32")
        .to_be_bytes();
    buf[..LEN_BYTES].copy_from_slice(&len_be);
    Ok(buf)
}

/// Reads frames from one stream. Cancel-safe: the partial frame lives in `self`, so dropping a
/// `next()` future (e.g. in `select!`) loses no bytes.
pub(crate) struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R) -> Self {
        FrameReader {
            inner,
            buf: Vec::with_capacity(READ_CHUNK_BYTES),
        }
    }

    /// The next frame's bytes (without the length); `Err(Closed)` at a clean end of stream.
    pub async fn next(&mut self) -> Result<Vec<u8>, FrameError> {
        loop {
            if let Some(frame) = self.take_frame()? {
                return Ok(frame);
            }
            self.buf.reserve(READ_CHUNK_BYTES);
            let n = self.inner.read_buf(&mut self.buf).await?;
            if n == 0 {
                return Err(if self.buf.is_empty() {
                    FrameError::Closed
                } else {
                    FrameError::Truncated
                });
            }
        }
    }

    fn take_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        if self.buf.len() < LEN_BYTES {
            return Ok(None);
        }
        let len_be: [u8; LEN_BYTES] = self.buf[..LEN_BYTES].try_into().expect("4 bytes");
        let len = u32::from_be_bytes(len_be) as usize;
        if len > FRAME_BYTES_MAX {
            return Err(FrameError::TooLarge {
                bytes: len,
                max: FRAME_BYTES_MAX,
            });
        }
        if self.buf.len() < LEN_BYTES + len {
            self.buf.reserve(LEN_BYTES + len - self.buf.len());
            return Ok(None);
        }
        let rest = self.buf.split_off(LEN_BYTES + len);
        let mut frame = std::mem::replace(&mut self.buf, rest);
        frame.drain(..LEN_BYTES);
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_split_across_reads_come_back_whole() {
        let a = encode(&serde_json::json!({"a": 1})).unwrap();
        let b = encode(&serde_json::json!("second")).unwrap();
        let (a_body, b_body) = (a[LEN_BYTES..].to_vec(), b[LEN_BYTES..].to_vec());
        let mut bytes = a.clone();
        bytes.extend_from_slice(&b);
        let (mut w, r) = tokio::io::duplex(3);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            w.write_all(&bytes).await.unwrap();
        });
        let mut reader = FrameReader::new(r);
        assert_eq!(reader.next().await.unwrap(), a_body);
        assert_eq!(reader.next().await.unwrap(), b_body);
        let back: serde_json::Value = crate::codec::decode(&a_body).unwrap();
        assert_eq!(back, serde_json::json!({"a": 1}));
        writer.await.unwrap();
        assert!(matches!(reader.next().await, Err(FrameError::Closed)));
    }

    #[tokio::test]
    async fn a_length_over_the_limit_is_refused_before_reading_the_body() {
        let len = u32::try_from(FRAME_BYTES_MAX + 1).unwrap().to_be_bytes();
        let mut reader = FrameReader::new(&len[..]);
        assert!(matches!(
            reader.next().await,
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn a_stream_ending_inside_a_frame_is_truncated() {
        let frame = encode(&serde_json::json!([1, 2, 3])).unwrap();
        let mut reader = FrameReader::new(&frame[..frame.len() - 1]);
        assert!(matches!(reader.next().await, Err(FrameError::Truncated)));
    }
}
