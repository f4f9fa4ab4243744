//! Free loopback ports, so several dev clusters (parallel tests) never
//! collide.

use std::net::{Ipv4Addr, TcpListener};

/// Asks the kernel for `count` distinct free ports. They are released
/// before the servers bind them; the window is small and the kernel hands
/// out ports in sequence, so a clash is unlikely and fails start-up loudly.
pub fn free_ports(count: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}
