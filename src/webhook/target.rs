//! Where a delivery may go: a receiver's name is resolved at each connect, and an address of
//! this machine or of a private network (loopback, RFC 1918, shared, link-local, unique-local,
//! unspecified, multicast, broadcast, and the IPv6 forms that embed such an IPv4 address) is
//! refused unless `--webhooks-allow-private`. The connection goes to an address that passed,
//! never to the name again, so a name that changes its answer between check and connect gains
//! nothing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Whether `ip` is not a public address: where an endpoint must not reach.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => private_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return private_v4(v4);
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // fc00::/7, unique local
                || first & 0xfe00 == 0xfc00
                // fe80::/10, link-local
                || first & 0xffc0 == 0xfe80
                // fec0::/10, the old site-local
                || first & 0xffc0 == 0xfec0
        }
    }
}

fn private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        // 0.0.0.0/8, "this network"
        || a == 0
        // 100.64.0.0/10, shared (carrier-grade NAT)
        || (a == 100 && (64..128).contains(&b))
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`),
/// NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`) address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..5] == [0; 5] && (s[5] == 0xffff || (s[5] == 0 && (s[6] != 0 || s[7] > 1))) {
        return Some(low);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

/// The addresses of `host:port` a delivery may connect to, in the resolver's order; an error
/// saying why when there is none.
pub async fn resolve(
    host: &str,
    port: u16,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, String> {
    // A bracketed IPv6 literal, as a URI's authority writes it.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let found: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| format!("resolving {bare}: {e}"))?
            .collect(),
    };
    if allow_private {
        return if found.is_empty() {
            Err(format!("{bare} has no address"))
        } else {
            Ok(found)
        };
    }
    let (public, private): (Vec<SocketAddr>, Vec<SocketAddr>) =
        found.into_iter().partition(|a| !is_private(a.ip()));
    if public.is_empty() {
        return Err(match private.first() {
            Some(addr) => format!(
                "{bare} is at {}, a loopback, private or link-local address, refused without \
                 --webhooks-allow-private",
                addr.ip()
            ),
            None => format!("{bare} has no address"),
        });
    }
    Ok(public)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_addresses_are_told_apart_from_public_ones() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "fc00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "ff02::1",
        ] {
            let ip: IpAddr = private.parse().expect(private);
            assert!(is_private(ip), "{private} should be private");
        }
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            let ip: IpAddr = public.parse().expect(public);
            assert!(!is_private(ip), "{public} should be public");
        }
    }

    #[tokio::test]
    async fn a_name_of_this_machine_is_refused_unless_allowed() {
        let refused = resolve("localhost", 443, false).await;
        assert!(refused.is_err(), "{refused:?}");
        assert!(resolve("127.0.0.1", 443, false).await.is_err());
        assert!(resolve("[::1]", 443, false).await.is_err());
        let allowed = resolve("127.0.0.1", 8443, true).await.expect("allowed");
        assert_eq!(allowed, vec!["127.0.0.1:8443".parse().expect("addr")]);
    }
}
