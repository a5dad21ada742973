//! Namespaces, processes inside them, TCP pairs, veth links and usage
//! accounting. Need root (skip without CI, fail under CI).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use weir_lab::{Netns, Proc, VethPair, ci};

fn ns_exists(name: &str) -> bool {
    Path::new(weir_lab::netns::NETNS_DIR).join(name).exists()
}

fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s[s.rfind(')').unwrap() + 2..].chars().next().unwrap();
            state != 'Z' && state != 'X'
        }
        Err(_) => false,
    }
}

#[test]
fn namespace_has_only_lo_and_is_gone_after_drop() -> anyhow::Result<()> {
    if !ci::require_root_and_netns()? {
        return Ok(());
    }
    let ns = Netns::new("only-lo")?;
    let name = ns.name().to_string();
    assert!(name.starts_with("weir-only_lo-"), "{name}");
    assert!(ns_exists(&name));
    assert_eq!(ns.links()?, vec!["lo".to_string()]);
    // Loopback works inside, and the namespace is a different one: a
    // listener made inside is not reachable from the host namespace.
    let port = ns.run_in(|| {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        TcpStream::connect(("127.0.0.1", port)).unwrap();
        std::mem::forget(l); // keep it listening until the namespace goes
        port
    });
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    // No route off the box inside.
    let out = weir_lab::process::run(
        ns.command("ip").args(["-4", "route", "show"]),
        Duration::from_secs(30),
    )?;
    assert!(out.success());
    assert!(String::from_utf8_lossy(&out.stdout).trim().is_empty());
    drop(ns);
    assert!(!ns_exists(&name), "{name} still exists after drop");
    Ok(())
}

#[test]
fn process_in_namespace_is_killed_on_drop() -> anyhow::Result<()> {
    if !ci::require_root_and_netns()? {
        return Ok(());
    }
    let ns = Netns::new("kill")?;
    // A process started with the namespace's command but not kept in a Proc
    // (so only the namespace can end it).
    let mut child = ns
        .command("sleep")
        .arg("300")
        .stdin(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !ns.pids().contains(&(pid as i32)) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        ns.pids().contains(&(pid as i32)),
        "sleep not seen in namespace"
    );
    drop(ns);
    let st = match weir_lab::process::wait_child(&mut child, Duration::from_secs(30))? {
        Some(st) => st,
        None => {
            let _ = child.kill(); // by its PID, still unreaped
            let _ = child.wait();
            panic!("sleep (pid {pid}) outlived its namespace");
        }
    };
    assert!(!st.success(), "sleep should have been killed");
    assert!(!pid_alive(pid));
    Ok(())
}

#[test]
fn proc_in_namespace_is_killed_on_drop_and_pid_is_the_program() -> anyhow::Result<()> {
    if !ci::require_root_and_netns()? {
        return Ok(());
    }
    let ns = Netns::new("proc")?;
    let mut p = Proc::spawn(
        "sleeper",
        ns.command("sh")
            .args(["-c", "echo $$; exec sleep 300"])
            .stdout(Stdio::piped()),
    )?;
    let mut out = String::new();
    let mut so = p.take_stdout().unwrap();
    let mut b = [0u8; 1];
    while so.read(&mut b)? == 1 && b[0] != b'\n' {
        out.push(b[0] as char);
    }
    assert_eq!(
        out.trim().parse::<u32>()?,
        p.pid(),
        "ip netns exec must exec"
    );
    assert!(p.is_running());
    let pid = p.pid();
    drop(p);
    assert!(!pid_alive(pid));
    Ok(())
}

#[test]
fn tcp_pair_carries_bytes_both_ways() -> anyhow::Result<()> {
    if !ci::require_root_and_netns()? {
        return Ok(());
    }
    let ns = Netns::new("pair")?;
    let (a, b) = ns.tcp_pair()?;
    let mut a = TcpStream::from(a);
    let mut b = TcpStream::from(b);
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + 3) as u8).collect();
    let d2 = data.clone();
    let w = std::thread::spawn(move || {
        a.write_all(&d2).unwrap();
        a.shutdown(std::net::Shutdown::Write).unwrap();
        let mut back = Vec::new();
        a.read_to_end(&mut back).unwrap();
        back
    });
    let mut got = Vec::new();
    b.read_to_end(&mut got)?;
    assert_eq!(got, data);
    b.write_all(b"pong")?;
    drop(b);
    assert_eq!(w.join().unwrap(), b"pong");
    Ok(())
}

#[test]
fn tcp_pair_drives_a_program_on_stdio() -> anyhow::Result<()> {
    if !ci::require_root_and_netns()? {
        return Ok(());
    }
    let ns = Netns::new("stdio")?;
    let (a, b) = ns.tcp_pair()?;
    let b2 = b.try_clone()?;
    // `tr` reads the line from the socket and writes it back upper-cased.
    let mut p = Proc::spawn(
        "tr",
        ns.command("tr")
            .args(["a-z", "A-Z"])
            .stdin(Stdio::from(b))
            .stdout(Stdio::from(b2)),
    )?;
    let mut a = TcpStream::from(a);
    a.write_all(b"hello line\n")?;
    a.shutdown(std::net::Shutdown::Write)?;
    let mut got = String::new();
    a.read_to_string(&mut got)?;
    assert_eq!(got, "HELLO LINE\n");
    let (st, _) = p.wait_with_usage()?;
    assert!(st.success());
    Ok(())
}

#[test]
fn wait_port_waits_for_a_listener_and_times_out_without_one() -> anyhow::Result<()> {
    if !ci::require_root_and_netns()? {
        return Ok(());
    }
    let ns = Netns::new("port")?;
    let addr: SocketAddr = "127.0.0.1:47123".parse()?;
    assert!(ns.wait_port(addr, Duration::from_millis(200)).is_err());
    let mut p = Proc::spawn(
        "listener",
        ns.command("/usr/bin/python3").args([
            "-c",
            "import socket,time;s=socket.socket();s.bind(('127.0.0.1',47123));s.listen();time.sleep(60)",
        ]),
    )?;
    ns.wait_port(addr, Duration::from_secs(20))?;
    // The host namespace has no such listener.
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
    p.kill_tree()?;
    Ok(())
}

#[test]
fn veth_pair_links_two_namespaces() -> anyhow::Result<()> {
    if !ci::require_root_and_netns()? {
        return Ok(());
    }
    let pair = VethPair::new("veth_a", "veth_b", 7)?;
    let (a, b) = (&pair.a, &pair.b);
    assert_eq!(pair.cidr(), "10.231.7.0/24");
    assert_eq!(pair.a_ip.to_string(), "10.231.7.1");
    assert_eq!(a.links()?.len(), 2);
    let l = a.run_in(|| TcpListener::bind("10.231.7.1:0").unwrap());
    let addr = l.local_addr()?;
    let peer = b.run_in(move || {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        s.write_all(b"over veth").unwrap();
        s.local_addr().unwrap()
    });
    let (mut s, from) = l.accept()?;
    assert_eq!(from, peer);
    assert_eq!(from.ip().to_string(), "10.231.7.2");
    let mut got = String::new();
    s.read_to_string(&mut got)?;
    assert_eq!(got, "over veth");
    assert!(Netns::link_pair(a, a, "10.231.8.1/24", "10.231.8.2/24").is_err());
    assert!(Netns::link_pair(a, b, "1.2.3.4/24", "10.231.9.2/24").is_err());
    Ok(())
}

#[test]
fn usage_reports_cpu_for_a_busy_child() -> anyhow::Result<()> {
    // No namespace needed: accounting is plain wait4.
    let mut p = Proc::spawn(
        "busy",
        Command::new("sh").args(["-c", "head -c 300000000 /dev/zero | sha1sum >/dev/null"]),
    )?;
    let (st, u) = p.wait_with_usage()?;
    assert!(st.success());
    assert!(u.cpu_s() > 0.05, "{u:?}");
    assert!(u.max_rss_kib > 100, "{u:?}");
    assert!(u.wall_s >= u.cpu_s() / 2.0 - 0.05, "{u:?}");
    assert!(u.vol_ctx_switches + u.invol_ctx_switches > 0, "{u:?}");
    Ok(())
}
