//! Network namespaces for real network partitions between local
//! processes: a [`Network`] gives the brokers an address that namespaces
//! reach, and each [`Netns`] is a namespace joined to the host by a veth
//! pair, which [`Netns::cut`] silences both ways (packets dropped, no
//! reset, no error: what a switch that fails or a firewall that drops
//! does) until [`Netns::heal`].
//!
//! This machine's kernel has neither netem nor iptables; the cut points
//! each side's neighbour entry for the other at a MAC address nobody has,
//! so frames leave and are discarded by the receiving end. Needs root
//! (`ip netns` and `ip link`).

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The namespaces and links of one test process: numbered from here.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A private /16 for this test process, so concurrent test binaries do not
/// collide: 10.(100 + pid % 100).0.0.
fn subnet() -> u32 {
    100 + std::process::id() % 100
}

fn ip(args: &[&str]) {
    let output = Command::new("ip")
        .args(args)
        .output()
        .expect("`ip` runs (iproute2)");
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip").args(args).output();
}

/// Whether this machine lets a test make network namespaces (root, and
/// iproute2).
pub fn netns_available() -> bool {
    let name = format!("sf-probe-{}", std::process::id());
    let made = Command::new("ip")
        .args(["netns", "add", &name])
        .output()
        .is_ok_and(|o| o.status.success());
    if made {
        ip_quiet(&["netns", "del", &name]);
    }
    made
}

/// An address on the host, outside loopback, that every namespace of this
/// test process reaches: the brokers listen on it.
pub struct Network {
    /// The brokers' address.
    pub host: String,
    link: String,
}

impl Network {
    pub fn create() -> Network {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let link = format!("sfb{}x{n}", std::process::id() % 100_000);
        let peer = format!("{link}p");
        let host = format!("10.{}.255.{}", subnet(), n % 250 + 1);
        // A veth pair with both ends on the host: an interface to hold the
        // address (this kernel has no dummy interfaces).
        ip(&["link", "add", &link, "type", "veth", "peer", "name", &peer]);
        ip(&["addr", "add", &format!("{host}/32"), "dev", &link]);
        ip(&["link", "set", &link, "up"]);
        ip(&["link", "set", &peer, "up"]);
        Network { host, link }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        ip_quiet(&["link", "del", &self.link]);
    }
}

/// A network namespace joined to the host by a veth pair, its default
/// route through the host.
pub struct Netns {
    pub name: String,
    /// The host's end of the pair.
    pub host_ip: String,
    /// The namespace's address: where the host reaches what runs inside.
    pub ip: String,
    host_link: String,
    link: String,
}

impl Netns {
    pub fn create() -> Netns {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}x{n}", std::process::id() % 100_000);
        let name = format!("sf-{tag}");
        let host_link = format!("sfh{tag}");
        let link = format!("sfn{tag}");
        // A /30 per namespace: .1 the host, .2 the namespace.
        let base = (n % 60) * 4;
        let host_ip = format!("10.{}.0.{}", subnet(), base + 1);
        let ns_ip = format!("10.{}.0.{}", subnet(), base + 2);
        ip(&["netns", "add", &name]);
        ip(&[
            "link", "add", &host_link, "type", "veth", "peer", "name", &link,
        ]);
        ip(&["link", "set", &link, "netns", &name]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &host_link]);
        ip(&["link", "set", &host_link, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &name, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        inside(&["addr", "add", &format!("{ns_ip}/30"), "dev", &link]);
        inside(&["link", "set", &link, "up"]);
        inside(&["link", "set", "lo", "up"]);
        inside(&["route", "add", "default", "via", &host_ip]);
        Netns {
            name,
            host_ip,
            ip: ns_ip,
            host_link,
            link,
        }
    }

    /// The command prefix that runs a program inside the namespace.
    pub fn exec_prefix(&self) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.name.clone(),
        ]
    }

    /// Silences the link both ways: every frame goes to a MAC address that
    /// nobody has, and is dropped where it arrives.
    pub fn cut(&self) {
        ip(&[
            "netns",
            "exec",
            &self.name,
            "ip",
            "neigh",
            "replace",
            &self.host_ip,
            "lladdr",
            "02:00:00:00:de:ad",
            "nud",
            "permanent",
            "dev",
            &self.link,
        ]);
        ip(&[
            "neigh",
            "replace",
            &self.ip,
            "lladdr",
            "02:00:00:00:be:ef",
            "nud",
            "permanent",
            "dev",
            &self.host_link,
        ]);
    }

    /// Ends a [`Netns::cut`]: the neighbours are learnt again.
    pub fn heal(&self) {
        ip_quiet(&[
            "netns",
            "exec",
            &self.name,
            "ip",
            "neigh",
            "del",
            &self.host_ip,
            "dev",
            &self.link,
        ]);
        ip_quiet(&["neigh", "del", &self.ip, "dev", &self.host_link]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        ip_quiet(&["netns", "del", &self.name]);
        ip_quiet(&["link", "del", &self.host_link]);
    }
}
