//! An accepted connection tagged with what jpd knows of its peer: tonic hands the tag
//! ([`Connected::ConnectInfo`]) to every request, where the auth layer reads it. One
//! type for both listeners: a Unix stream with its `UnixPeer`, a TLS stream with its
//! `TlsPeer` and the TCP connection slot it holds.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tonic::transport::server::Connected;

pub struct Tagged<S, P> {
    stream: S,
    peer: P,
    /// A connection slot, freed when the server drops the connection (TCP only).
    _slot: Option<OwnedSemaphorePermit>,
}

impl<S, P> Tagged<S, P> {
    pub fn new(stream: S, peer: P, slot: Option<OwnedSemaphorePermit>) -> Tagged<S, P> {
        Tagged {
            stream,
            peer,
            _slot: slot,
        }
    }
}

impl<S, P: Clone + Send + Sync + 'static> Connected for Tagged<S, P> {
    type ConnectInfo = P;
    fn connect_info(&self) -> P {
        self.peer.clone()
    }
}

impl<S: AsyncRead + Unpin, P: Unpin> AsyncRead for Tagged<S, P> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin, P: Unpin> AsyncWrite for Tagged<S, P> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
