//! Server-side keys: the peer address of a request ([`PeerKey`]), read from
//! the connection and, only behind proxies the user trusts, from
//! `X-Forwarded-For` or `Forwarded`.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use http::HeaderMap;
use http::request::Parts;

use crate::error::ConfigError;

/// The address of the connection's peer, as a request extension.
///
/// Insert it where connections are accepted (a plain hyper server); axum's
/// `ConnectInfo<SocketAddr>` is read as well with the `axum` feature, and
/// tonic's `TcpConnectInfo` with the `tonic` feature.
///
/// ```
/// use std::net::SocketAddr;
/// use http::Request;
/// use tower_limits::http::PeerAddr;
///
/// let peer: SocketAddr = "192.0.2.7:50123".parse().unwrap();
/// let mut request = Request::new(());
/// request.extensions_mut().insert(PeerAddr(peer));
/// assert_eq!(request.extensions().get::<PeerAddr>(), Some(&PeerAddr(peer)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// Takes the key of a request from its head; see
/// [`TooManyRequestsLayer::with_key`](super::TooManyRequestsLayer::with_key).
///
/// `None` means the head carries no key: [`PeerKey`] answers it for a
/// request without a peer address, and the layer then answers `500`
/// rather than putting every such request under one shared key.
///
/// Implemented for [`PeerKey`] and for closures `Fn(&http::request::Parts) -> K`,
/// which always find a key.
///
/// ```
/// use http::Request;
/// use tower_limits::http::KeyOf;
///
/// let tenant = |head: &http::request::Parts| {
///     head.headers.get("x-tenant").and_then(|v| v.to_str().ok()).unwrap_or("anonymous").to_owned()
/// };
/// let (head, ()) = Request::builder().header("x-tenant", "acme").body(()).unwrap().into_parts();
/// assert_eq!(tenant.key_of(&head).as_deref(), Some("acme"));
/// ```
pub trait KeyOf<K> {
    /// The key of the request whose head is `head`, or `None` if it has
    /// none.
    fn key_of(&self, head: &Parts) -> Option<K>;
}

impl<K, F: Fn(&Parts) -> K> KeyOf<K> for F {
    fn key_of(&self, head: &Parts) -> Option<K> {
        Some(self(head))
    }
}

/// Which header a trusted proxy appends the client's address to.
///
/// ```
/// use tower_limits::http::ForwardedHeader;
///
/// assert_ne!(ForwardedHeader::XForwardedFor, ForwardedHeader::Forwarded);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

/// Addresses and ranges of the proxies in front of a server.
///
/// ```
/// use tower_limits::http::TrustedProxies;
///
/// # fn main() -> Result<(), tower_limits::error::ConfigError> {
/// let proxies = TrustedProxies::new(["10.0.0.0/8", "127.0.0.1", "fd00::/8"])?;
/// assert!(proxies.contains("10.1.2.3".parse().unwrap()));
/// assert!(!proxies.contains("192.0.2.1".parse().unwrap()));
/// assert!(TrustedProxies::new(["10.0.0.0/33"]).is_err());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    ranges: Vec<(IpAddr, u8)>,
}

impl TrustedProxies {
    /// Proxies given as addresses (`10.0.0.1`) or CIDR ranges (`10.0.0.0/8`).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first entry that is not an address or a
    /// range with a valid prefix length.
    ///
    /// ```
    /// use tower_limits::http::TrustedProxies;
    ///
    /// let error = TrustedProxies::new(["proxy.internal"]).unwrap_err();
    /// assert_eq!(error.field(), "trusted_proxies");
    /// ```
    pub fn new<I>(proxies: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let ranges = proxies
            .into_iter()
            .map(|proxy| parse_range(proxy.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Self { ranges })
    }

    /// Whether `addr` is one of the proxies.
    ///
    /// ```
    /// use tower_limits::http::TrustedProxies;
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let proxies = TrustedProxies::new(["2001:db8::/32"])?;
    /// assert!(proxies.contains("2001:db8::1".parse().unwrap()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        self.ranges
            .iter()
            .any(|&(network, prefix)| in_range(addr, network, prefix))
    }
}

fn parse_range(text: &str) -> Result<(IpAddr, u8), ConfigError> {
    let invalid = || {
        ConfigError::new(
            "trusted_proxies",
            text,
            "must be an IP address or a CIDR range such as 10.0.0.0/8",
        )
    };
    let (addr, prefix) = text.trim().split_once('/').unwrap_or((text.trim(), ""));
    let addr = IpAddr::from_str(addr)
        .map_err(|_| invalid())?
        .to_canonical();
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = if prefix.is_empty() {
        max
    } else {
        prefix.parse::<u8>().map_err(|_| invalid())?
    };
    if prefix > max {
        return Err(invalid());
    }
    Ok((addr, prefix))
}

/// Whether `addr` is in `network/prefix`.
fn in_range(addr: IpAddr, network: IpAddr, prefix: u8) -> bool {
    match (addr, network) {
        (IpAddr::V4(addr), IpAddr::V4(network)) => same_prefix(
            u32::from(addr).into(),
            u32::from(network).into(),
            prefix,
            32,
        ),
        (IpAddr::V6(addr), IpAddr::V6(network)) => {
            same_prefix(u128::from(addr), u128::from(network), prefix, 128)
        }
        _ => false,
    }
}

fn same_prefix(addr: u128, network: u128, prefix: u8, bits: u32) -> bool {
    let shift = bits - u32::from(prefix);
    addr.checked_shr(shift).unwrap_or(0) == network.checked_shr(shift).unwrap_or(0)
}

/// The peer address of a request, as the key of a per-client limit: the
/// default key of [`TooManyRequestsLayer`](super::TooManyRequestsLayer).
///
/// It is read from the connection ([`PeerAddr`], axum's
/// `ConnectInfo<SocketAddr>` with the `axum` feature, or tonic's
/// `TcpConnectInfo` with the `tonic` feature), which a client cannot
/// forge. A request without any of them has no key (`None`): a server
/// that forgot to record peers (axum without
/// `into_make_service_with_connect_info::<SocketAddr>()`) would otherwise
/// put every client under one shared limit, so
/// [`TooManyRequestsLayer`](super::TooManyRequestsLayer) answers such a
/// request `500` and logs why, once.
///
/// Two rules keep a client from minting fresh keys:
///
/// * IPv6 peers are keyed by their /64 network (configurable with
///   [`ipv6_prefix`](PeerKey::ipv6_prefix)), since one host commonly holds
///   a whole /64; IPv4-mapped IPv6 addresses count as IPv4.
/// * A forwarded-for header is read only when the connection comes from a
///   proxy named in [`behind_proxies`](PeerKey::behind_proxies), and then
///   the right-most address that is not a trusted proxy is taken: addresses
///   further left were written by the client and are never used.
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use http::Request;
/// use tower_limits::http::{ForwardedHeader, KeyOf, PeerAddr, PeerKey, TrustedProxies};
///
/// # fn main() -> Result<(), tower_limits::error::ConfigError> {
/// let proxies = TrustedProxies::new(["10.0.0.0/8"])?;
/// let key = PeerKey::behind_proxies(proxies, ForwardedHeader::XForwardedFor);
///
/// let mut request = Request::builder()
///     // The client wrote "203.0.113.9"; the proxy appended the real client.
///     .header("x-forwarded-for", "203.0.113.9, 198.51.100.4")
///     .body(())
///     .unwrap();
/// request.extensions_mut().insert(PeerAddr("10.0.0.2:4000".parse().unwrap()));
/// let (head, ()) = request.into_parts();
/// assert_eq!(key.key_of(&head), "198.51.100.4".parse::<IpAddr>().ok());
///
/// let (no_peer, ()) = Request::new(()).into_parts();
/// assert_eq!(key.key_of(&no_peer), None);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PeerKey {
    proxies: Option<(TrustedProxies, ForwardedHeader)>,
    ipv6_prefix: u8,
}

impl Default for PeerKey {
    fn default() -> Self {
        Self::new()
    }
}

impl PeerKey {
    /// Keys by the connection's peer; forwarded-for headers are ignored.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use http::Request;
    /// use tower_limits::http::{KeyOf, PeerAddr, PeerKey};
    ///
    /// let mut request = Request::builder().header("x-forwarded-for", "1.2.3.4").body(()).unwrap();
    /// request.extensions_mut().insert(PeerAddr("192.0.2.1:443".parse().unwrap()));
    /// let (head, ()) = request.into_parts();
    /// assert_eq!(PeerKey::new().key_of(&head), "192.0.2.1".parse::<IpAddr>().ok());
    /// ```
    pub fn new() -> Self {
        Self {
            proxies: None,
            ipv6_prefix: 64,
        }
    }

    /// Keys by the client address that the trusted `proxies` append to
    /// `header`, for connections that come from one of them.
    ///
    /// ```
    /// use tower_limits::http::{ForwardedHeader, PeerKey, TrustedProxies};
    ///
    /// # fn main() -> Result<(), tower_limits::error::ConfigError> {
    /// let key = PeerKey::behind_proxies(TrustedProxies::new(["127.0.0.1"])?, ForwardedHeader::Forwarded);
    /// # let _ = key;
    /// # Ok(())
    /// # }
    /// ```
    pub fn behind_proxies(proxies: TrustedProxies, header: ForwardedHeader) -> Self {
        Self {
            proxies: Some((proxies, header)),
            ..Self::new()
        }
    }

    /// Keys IPv6 clients by their first `prefix` bits (default 64; 128 keys
    /// each address apart).
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use http::Request;
    /// use tower_limits::http::{KeyOf, PeerAddr, PeerKey};
    ///
    /// let mut request = Request::new(());
    /// request.extensions_mut().insert(PeerAddr("[2001:db8:1:2:3:4:5:6]:443".parse().unwrap()));
    /// let (head, ()) = request.into_parts();
    /// assert_eq!(PeerKey::new().key_of(&head), "2001:db8:1:2::".parse::<IpAddr>().ok());
    /// assert_eq!(PeerKey::new().ipv6_prefix(48).key_of(&head), "2001:db8:1::".parse::<IpAddr>().ok());
    /// ```
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.ipv6_prefix = prefix.min(128);
        self
    }

    /// The client address: the peer, or behind trusted proxies the
    /// right-most untrusted forwarded address.
    fn client(&self, head: &Parts) -> Option<IpAddr> {
        let peer = connection_peer(head)?.to_canonical();
        let Some((proxies, header)) = &self.proxies else {
            return Some(peer);
        };
        if !proxies.contains(peer) {
            return Some(peer);
        }
        let chain = forwarded_chain(&head.headers, *header);
        let mut nearest = peer;
        for hop in chain.iter().rev() {
            // A hop that is not an address was not written by a trusted
            // proxy: key by the nearest trusted one instead.
            let Some(hop) = hop.map(|hop| hop.to_canonical()) else {
                return Some(nearest);
            };
            if !proxies.contains(hop) {
                return Some(hop);
            }
            nearest = hop;
        }
        Some(nearest)
    }

    /// `addr`, with IPv6 addresses cut to the configured prefix.
    fn masked(&self, addr: IpAddr) -> IpAddr {
        match addr {
            IpAddr::V4(_) => addr,
            IpAddr::V6(v6) => {
                let keep = u32::from(self.ipv6_prefix);
                let mask = u128::MAX.checked_shl(128 - keep).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        }
    }
}

impl KeyOf<IpAddr> for PeerKey {
    fn key_of(&self, head: &Parts) -> Option<IpAddr> {
        self.client(head).map(|addr| self.masked(addr))
    }
}

/// The peer of the connection, from the request's extensions.
fn connection_peer(head: &Parts) -> Option<IpAddr> {
    if let Some(PeerAddr(addr)) = head.extensions.get::<PeerAddr>() {
        return Some(addr.ip());
    }
    axum_peer(head).or_else(|| tonic_peer(head))
}

#[cfg(feature = "axum")]
fn axum_peer(head: &Parts) -> Option<IpAddr> {
    let info = head
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()?;
    Some(info.0.ip())
}

#[cfg(not(feature = "axum"))]
fn axum_peer(_head: &Parts) -> Option<IpAddr> {
    None
}

#[cfg(feature = "tonic")]
fn tonic_peer(head: &Parts) -> Option<IpAddr> {
    use tonic::transport::server::TcpConnectInfo;
    let info = head.extensions.get::<TcpConnectInfo>()?;
    Some(info.remote_addr()?.ip())
}

#[cfg(not(feature = "tonic"))]
fn tonic_peer(_head: &Parts) -> Option<IpAddr> {
    None
}

/// The addresses of `header`, in order (all its lines); `None` for an entry
/// that is not an address (`unknown`, an obfuscated name, garbage).
fn forwarded_chain(headers: &HeaderMap, header: ForwardedHeader) -> Vec<Option<IpAddr>> {
    let name = match header {
        ForwardedHeader::XForwardedFor => "x-forwarded-for",
        ForwardedHeader::Forwarded => "forwarded",
    };
    let mut chain = Vec::new();
    for line in headers.get_all(name) {
        let Ok(line) = line.to_str() else {
            chain.push(None);
            continue;
        };
        for entry in line.split(',') {
            chain.push(match header {
                ForwardedHeader::XForwardedFor => parse_node(entry),
                ForwardedHeader::Forwarded => forwarded_for(entry),
            });
        }
    }
    chain
}

/// The `for=` node of one `Forwarded` element.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        name.eq_ignore_ascii_case("for")
            .then(|| parse_node(value))
            .flatten()
    })
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`,
/// `[2001:db8::1]:80`, optionally quoted.
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim().trim_matches('"');
    if let Ok(addr) = node.parse::<IpAddr>() {
        return Some(addr);
    }
    if let Ok(addr) = node.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    node.strip_prefix('[')?
        .split_once(']')
        .and_then(|(addr, _)| addr.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "tonic")]
    #[test]
    fn reads_the_peer_tonic_records() {
        use tonic::transport::server::TcpConnectInfo;
        let mut request = http::Request::new(());
        request.extensions_mut().insert(TcpConnectInfo {
            local_addr: "127.0.0.1:50051".parse().ok(),
            remote_addr: "198.51.100.9:40000".parse().ok(),
        });
        let (head, ()) = request.into_parts();
        assert_eq!(
            PeerKey::new().key_of(&head),
            "198.51.100.9".parse::<IpAddr>().ok()
        );
    }

    #[test]
    fn parses_nodes_as_proxies_write_them() {
        for node in [
            "192.0.2.1",
            " 192.0.2.1:80",
            "\"[2001:db8::1]:4711\"",
            "[2001:db8::1]",
        ] {
            assert!(parse_node(node).is_some(), "{node:?}");
        }
        for node in ["unknown", "_hidden", "", "[::1", "999.1.1.1"] {
            assert!(parse_node(node).is_none(), "{node:?}");
        }
    }

    #[test]
    fn reads_the_for_parameter_of_forwarded() {
        assert_eq!(
            forwarded_for("proto=https;For=\"[2001:db8::17]:4711\""),
            Some("2001:db8::17".parse().unwrap())
        );
        assert_eq!(forwarded_for("by=10.0.0.1"), None);
    }

    #[test]
    fn zero_prefix_ranges_contain_everything_of_their_family() {
        let all = TrustedProxies::new(["0.0.0.0/0"]).unwrap();
        assert!(all.contains("203.0.113.1".parse().unwrap()));
        assert!(!all.contains("2001:db8::1".parse().unwrap()));
    }
}
