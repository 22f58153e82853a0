//! [`init_network`]: the files and command lines of a network of separate `modnode run`
//! processes, one per machine (or several per machine: every node has its own ports).
//!
//! For N nodes in a directory D it writes D/genesis.json (the first K nodes are the
//! authorities, 64 generated validators) and, per node, D/node-i holding the node's key and a
//! copy of the genesis, so each machine needs only its own D/node-i. Node i listens on
//! `ip_i:base+10i` (UDP, peers), its admin API on `127.0.0.1:base+10i+1`; node 0 hosts the dev
//! deposit contract on `ip_0:base+2`, which every other node follows with `--eth1-endpoint`.
//! Every node bootstraps from all the others, so the start order does not matter.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::chain::genesis::Genesis;
use crate::net::identity::NodeIdentity;

/// Ports each node takes from the base port on.
pub const PORTS_PER_NODE: u16 = 10;

/// What network to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkSpec {
    /// Number of nodes.
    pub nodes: usize,
    /// How many of them (the first ones) are authorities.
    pub authorities: usize,
    /// Where the files go.
    pub dir: PathBuf,
    /// The IP of node i's machine (127.0.0.1 for nodes not named).
    pub hosts: BTreeMap<usize, IpAddr>,
    /// Node 0's peer port; node i uses `base_port + 10 i` and the next two.
    pub base_port: u16,
    /// Slot length in ms.
    pub slot_ms: u64,
    /// The chain id in the genesis.
    pub chain_id: String,
    /// When slot 0 starts (ms since the Unix epoch).
    pub genesis_time_ms: u64,
}

/// One node's place in the network and its command line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodePlan {
    /// Its index.
    pub index: usize,
    /// Its node id (hex).
    pub node_id: String,
    /// Whether it produces blocks.
    pub authority: bool,
    /// Its data directory (holds its key and its copy of the genesis).
    pub data_dir: PathBuf,
    /// Its genesis file.
    pub genesis: PathBuf,
    /// Where it accepts peers (UDP).
    pub listen: SocketAddr,
    /// Its admin API.
    pub admin: SocketAddr,
    /// Where it hosts the dev deposit contract (node 0 only).
    pub dev_contract: Option<SocketAddr>,
    /// The dev deposit contract it follows (every other node).
    pub eth1_endpoint: Option<String>,
    /// `id@addr` of every other node.
    pub bootstrap: Vec<String>,
}

impl NodePlan {
    /// The arguments after `modnode`.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "run".to_string(),
            "--data-dir".into(),
            self.data_dir.display().to_string(),
            "--genesis".into(),
            self.genesis.display().to_string(),
            "--listen".into(),
            self.listen.to_string(),
            "--admin".into(),
            self.admin.to_string(),
        ];
        if let Some(dev) = self.dev_contract {
            args.extend(["--dev-contract-listen".into(), dev.to_string()]);
        }
        if let Some(url) = &self.eth1_endpoint {
            args.extend(["--eth1-endpoint".into(), url.clone()]);
        }
        for peer in &self.bootstrap {
            args.extend(["--bootstrap".into(), peer.clone()]);
        }
        args
    }

    /// The whole command line, each argument quoted for a POSIX shell where it needs it.
    pub fn command_line(&self, program: &str) -> String {
        std::iter::once(program.to_string())
            .chain(self.args())
            .map(|a| shell_quote(&a))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Why the network could not be created.
#[derive(Debug, thiserror::Error)]
pub enum NetworkInitError {
    /// The spec is inconsistent (the caller's to fix; the message says how).
    #[error("{0}")]
    Spec(String),
    /// The directory already holds a network (ours to keep: overwriting it would orphan its
    /// nodes' chains).
    #[error("{} already exists: use another --dir, or delete it to start a new network", path.display())]
    Exists {
        /// The genesis file found.
        path: PathBuf,
    },
    /// A file or directory could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A node key could not be created.
    #[error("cannot create the node key in {}: {reason}", dir.display())]
    Identity {
        /// The node's directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
    /// The generated genesis was refused (a bug here, or an impossible spec).
    #[error("the generated genesis is invalid: {0}")]
    Genesis(String),
}

/// Creates the network's files and returns each node's plan (see the module docs).
pub fn init_network(spec: &NetworkSpec) -> Result<Vec<NodePlan>, NetworkInitError> {
    check(spec)?;
    let genesis_path = spec.dir.join("genesis.json");
    if genesis_path.exists() {
        return Err(NetworkInitError::Exists { path: genesis_path });
    }
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| NetworkInitError::Write { path, source }
    };
    let mut ids = Vec::with_capacity(spec.nodes);
    for i in 0..spec.nodes {
        let dir = spec.dir.join(format!("node-{i}"));
        std::fs::create_dir_all(&dir).map_err(write_err(&dir))?;
        let identity =
            NodeIdentity::load_or_create(&dir).map_err(|e| NetworkInitError::Identity {
                dir: dir.clone(),
                reason: e.to_string(),
            })?;
        ids.push(identity.node_id().to_string());
    }
    let text = serde_json::to_string_pretty(&serde_json::json!({
        "chain_id": spec.chain_id,
        "genesis_time_ms": spec.genesis_time_ms,
        "slot_ms": spec.slot_ms,
        "authorities": ids.iter().take(spec.authorities).collect::<Vec<_>>(),
        "generated_validators": { "count": 64, "seed": 1 },
    }))
    .map_err(|e| NetworkInitError::Genesis(e.to_string()))?;
    Genesis::from_json(&text, &genesis_path.display().to_string())
        .map_err(|e| NetworkInitError::Genesis(e.to_string()))?;
    std::fs::write(&genesis_path, &text).map_err(write_err(&genesis_path))?;

    let listen: Vec<SocketAddr> = (0..spec.nodes)
        .map(|i| Ok(SocketAddr::new(host(spec, i), port(spec, i, 0)?)))
        .collect::<Result<_, NetworkInitError>>()?;
    let contract = SocketAddr::new(host(spec, 0), port(spec, 0, 2)?);
    let mut plans = Vec::with_capacity(spec.nodes);
    for (i, id) in ids.iter().enumerate() {
        let data_dir = spec.dir.join(format!("node-{i}"));
        let genesis = data_dir.join("genesis.json");
        std::fs::write(&genesis, &text).map_err(write_err(&genesis))?;
        let bootstrap = ids
            .iter()
            .zip(&listen)
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (peer, addr))| format!("{peer}@{addr}"))
            .collect();
        plans.push(NodePlan {
            index: i,
            node_id: id.clone(),
            authority: i < spec.authorities,
            data_dir,
            genesis,
            listen: listen.get(i).copied().unwrap_or(contract),
            admin: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port(spec, i, 1)?),
            dev_contract: (i == 0).then_some(contract),
            eth1_endpoint: (i != 0).then(|| format!("http://{contract}")),
            bootstrap,
        });
    }
    Ok(plans)
}

fn check(spec: &NetworkSpec) -> Result<(), NetworkInitError> {
    let fail = |m: String| Err(NetworkInitError::Spec(m));
    if spec.nodes == 0 {
        return fail("--nodes must be at least 1".into());
    }
    if spec.authorities == 0 || spec.authorities > spec.nodes {
        return fail(format!(
            "--authorities {} must be between 1 and --nodes {}",
            spec.authorities, spec.nodes
        ));
    }
    if let Some(i) = spec.hosts.keys().find(|i| **i >= spec.nodes) {
        return fail(format!(
            "--host-of {i}=…: there is no node {i} (nodes are 0 to {})",
            spec.nodes.saturating_sub(1)
        ));
    }
    port(
        spec,
        spec.nodes.saturating_sub(1),
        PORTS_PER_NODE.saturating_sub(1),
    )
    .map(drop)
}

fn host(spec: &NetworkSpec, node: usize) -> IpAddr {
    spec.hosts
        .get(&node)
        .copied()
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// `base + 10 node + offset`, or an error naming the flag when it passes 65535.
fn port(spec: &NetworkSpec, node: usize, offset: u16) -> Result<u16, NetworkInitError> {
    u16::try_from(node)
        .ok()
        .and_then(|n| n.checked_mul(PORTS_PER_NODE))
        .and_then(|p| p.checked_add(spec.base_port))
        .and_then(|p| p.checked_add(offset))
        .ok_or_else(|| {
            NetworkInitError::Spec(format!(
                "--base-port {} leaves no room for {} nodes of {PORTS_PER_NODE} ports each; give a lower one",
                spec.base_port, spec.nodes
            ))
        })
}

/// `arg` as a POSIX shell reads it: unchanged when it holds only safe characters, otherwise
/// in single quotes.
fn shell_quote(arg: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:@=,+[]".contains(c);
    if !arg.is_empty() && arg.chars().all(safe) {
        return arg.to_string();
    }
    format!("'{}'", arg.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dir: &Path) -> NetworkSpec {
        NetworkSpec {
            nodes: 3,
            authorities: 2,
            dir: dir.to_path_buf(),
            hosts: BTreeMap::from([(1, "10.0.0.2".parse().unwrap())]),
            base_port: 9400,
            slot_ms: 1000,
            chain_id: "t".into(),
            genesis_time_ms: 1,
        }
    }

    #[test]
    fn plans_give_each_node_its_ports_peers_and_deposit_source() {
        let dir = tempfile::tempdir().unwrap();
        let plans = init_network(&spec(dir.path())).unwrap();
        assert_eq!(plans.len(), 3);
        assert_eq!(plans[1].listen, "10.0.0.2:9410".parse().unwrap());
        assert_eq!(plans[2].admin, "127.0.0.1:9421".parse().unwrap());
        assert_eq!(
            plans[0].dev_contract,
            Some("127.0.0.1:9402".parse().unwrap())
        );
        assert_eq!(
            plans[1].eth1_endpoint.as_deref(),
            Some("http://127.0.0.1:9402")
        );
        assert_eq!(
            plans[0].bootstrap,
            [
                format!("{}@10.0.0.2:9410", plans[1].node_id),
                format!("{}@127.0.0.1:9420", plans[2].node_id)
            ]
        );
        assert_eq!(
            plans.iter().map(|p| p.authority).collect::<Vec<_>>(),
            [true, true, false]
        );
        let genesis = Genesis::from_file(&plans[2].genesis).unwrap();
        assert_eq!(genesis.authorities.len(), 2);
        assert_eq!(hex::encode(genesis.authorities[1]), plans[1].node_id);

        let err = init_network(&spec(dir.path())).unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
    }

    #[test]
    fn bad_specs_are_refused_naming_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                NetworkSpec {
                    authorities: 4,
                    ..spec(dir.path())
                },
                "--authorities 4",
            ),
            (
                NetworkSpec {
                    base_port: 65_530,
                    ..spec(dir.path())
                },
                "--base-port 65530",
            ),
            (
                NetworkSpec {
                    hosts: BTreeMap::from([(3, IpAddr::V4(Ipv4Addr::LOCALHOST))]),
                    ..spec(dir.path())
                },
                "--host-of 3",
            ),
        ];
        for (spec, flag) in cases {
            let err = init_network(&spec).unwrap_err().to_string();
            assert!(err.contains(flag), "{err}");
        }
        assert!(!dir.path().join("genesis.json").exists());
    }

    #[test]
    fn arguments_are_quoted_only_when_needed() {
        assert_eq!(shell_quote("--listen"), "--listen");
        assert_eq!(shell_quote("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
