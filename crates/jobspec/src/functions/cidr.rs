//! CIDR functions: cidrhost, cidrnetmask, cidrsubnet, cidrsubnets (IPv4 and IPv6).

use super::args::{integer, string, FnResult};
use super::Spec;
use hcl::eval::FuncArgs;
use hcl::Value;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub(super) const FUNCS: &[Spec] = &[
    Spec::fixed("cidrhost", 2, cidrhost),
    Spec::fixed("cidrnetmask", 1, cidrnetmask),
    Spec::fixed("cidrsubnet", 3, cidrsubnet),
    Spec::variadic("cidrsubnets", 1, cidrsubnets),
];

/// A parsed network: its address (host bits cleared), prefix length and address width.
#[derive(Clone, Copy)]
struct Net {
    addr: u128,
    len: u32,
    bits: u32,
}

impl Net {
    fn parse(f: &str, s: &str) -> Result<Net, String> {
        let bad = |why: &str| format!("{f}: invalid CIDR prefix {s:?}: {why}");
        let (ip, len) = s.split_once('/').ok_or_else(|| bad("missing /length"))?;
        let ip: IpAddr = ip.parse().map_err(|_| bad("invalid IP address"))?;
        let (addr, bits) = match ip {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
            IpAddr::V6(v6) => (u128::from(v6), 128),
        };
        let len: u32 = len
            .parse()
            .ok()
            .filter(|l| *l <= bits && !len.starts_with('+'))
            .ok_or_else(|| bad("invalid prefix length"))?;
        let net = Net { addr, len, bits };
        Ok(Net {
            addr: addr & net.mask(),
            ..net
        })
    }

    /// The netmask as an address-width integer.
    fn mask(&self) -> u128 {
        let all = if self.bits == 32 {
            u128::from(u32::MAX)
        } else {
            u128::MAX
        };
        let host = self.bits - self.len;
        if host >= 128 {
            0
        } else {
            all & !((1u128 << host) - 1)
        }
    }

    /// Number of addresses minus one (all host bits set), saturating for `/0` IPv6.
    fn host_max(&self) -> u128 {
        let host = self.bits - self.len;
        if host >= 128 {
            u128::MAX
        } else {
            (1u128 << host) - 1
        }
    }

    fn format_addr(&self, addr: u128) -> String {
        if self.bits == 32 {
            Ipv4Addr::from(u32::try_from(addr).unwrap_or(u32::MAX)).to_string()
        } else {
            Ipv6Addr::from(addr).to_string()
        }
    }

    fn to_cidr(self) -> String {
        format!("{}/{}", self.format_addr(self.addr), self.len)
    }

    /// The subnet numbered `num` after extending the prefix by `newbits`.
    fn subnet(&self, f: &str, newbits: i64, num: i64) -> Result<Net, String> {
        let new_len = i64::from(self.len) + newbits;
        if newbits < 0 || new_len > i64::from(self.bits) {
            return Err(format!(
                "{f}: insufficient address space to extend prefix of {} by {newbits}",
                self.len
            ));
        }
        let new_len = u32::try_from(new_len).unwrap_or(self.bits);
        let max = if newbits >= 128 {
            u128::MAX
        } else {
            (1u128 << newbits) - 1
        };
        let n = u128::try_from(num).ok().filter(|n| *n <= max).ok_or_else(|| {
            format!("{f}: prefix extension of {newbits} does not accommodate a subnet numbered {num}")
        })?;
        let shift = self.bits - new_len;
        let offset = if shift >= 128 { 0 } else { n << shift };
        Ok(Net {
            addr: self.addr | offset,
            len: new_len,
            bits: self.bits,
        })
    }
}

fn cidrhost(a: FuncArgs) -> FnResult {
    let net = Net::parse("cidrhost", &string("cidrhost", &a, 0, "prefix")?)?;
    let num = integer("cidrhost", &a, 1, "hostnum")?;
    let max = net.host_max();
    let host = if num < 0 {
        max.checked_sub(u128::from(num.unsigned_abs() - 1))
    } else {
        u128::try_from(num).ok().filter(|n| *n <= max)
    };
    let host = host.ok_or_else(|| {
        format!(
            "cidrhost: prefix of {} does not accommodate a host numbered {num}",
            net.len
        )
    })?;
    Ok(Value::from(net.format_addr(net.addr | host)))
}

fn cidrnetmask(a: FuncArgs) -> FnResult {
    let net = Net::parse("cidrnetmask", &string("cidrnetmask", &a, 0, "prefix")?)?;
    Ok(Value::from(net.format_addr(net.mask())))
}

fn cidrsubnet(a: FuncArgs) -> FnResult {
    let net = Net::parse("cidrsubnet", &string("cidrsubnet", &a, 0, "prefix")?)?;
    let newbits = integer("cidrsubnet", &a, 1, "newbits")?;
    let num = integer("cidrsubnet", &a, 2, "netnum")?;
    Ok(Value::from(
        net.subnet("cidrsubnet", newbits, num)?.to_cidr(),
    ))
}

/// Consecutive subnets of the given extra prefix bits, each aligned to its own size.
fn cidrsubnets(a: FuncArgs) -> FnResult {
    let net = Net::parse("cidrsubnets", &string("cidrsubnets", &a, 0, "prefix")?)?;
    let end = net.addr.checked_add(net.host_max());
    let mut next = Some(net.addr);
    let mut out = Vec::new();
    for i in 1..a.len() {
        let newbits = integer("cidrsubnets", &a, i, &format!("newbits {i}"))?;
        // Validates newbits against the address width.
        let sub = net.subnet("cidrsubnets", newbits, 0)?;
        let size_minus_one = sub.host_max();
        let start = next.and_then(|n| {
            let aligned = n.checked_add(size_minus_one)? & !size_minus_one;
            let last = aligned.checked_add(size_minus_one)?;
            (Some(last) <= end && aligned >= n).then_some(aligned)
        });
        let Some(start) = start else {
            return Err(format!(
                "cidrsubnets: not enough remaining address space for a subnet with a prefix of {} bits after {}",
                sub.len,
                out.last().and_then(Value::as_str).unwrap_or(&net.to_cidr())
            ));
        };
        out.push(Value::from(Net { addr: start, ..sub }.to_cidr()));
        next = start
            .checked_add(size_minus_one)
            .and_then(|l| l.checked_add(1));
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, check_err};

    #[test]
    fn cidrhost_netmask() {
        check(r#"cidrhost("10.12.112.0/20", 16)"#, r#""10.12.112.16""#);
        check(r#"cidrhost("10.12.112.0/20", 268)"#, r#""10.12.113.12""#);
        check(r#"cidrhost("10.12.112.0/20", -1)"#, r#""10.12.127.255""#);
        check(r#"cidrhost("10.12.127.5/20", 1)"#, r#""10.12.112.1""#);
        check(
            r#"cidrhost("fd00:fd12:3456:7890:00a2::/72", 34)"#,
            r#""fd00:fd12:3456:7890::22""#,
        );
        check_err(
            r#"cidrhost("10.0.0.0/30", 4)"#,
            "cidrhost: prefix of 30 does not accommodate a host numbered 4",
        );
        check_err(
            r#"cidrhost("10.0.0.0/30", -5)"#,
            "does not accommodate a host numbered -5",
        );
        check_err(
            r#"cidrhost("10.0.0.0", 1)"#,
            "cidrhost: invalid CIDR prefix \"10.0.0.0\": missing /length",
        );
        check_err(r#"cidrhost("10.0.0.0/33", 1)"#, "invalid prefix length");
        check(r#"cidrnetmask("172.16.0.0/12")"#, r#""255.240.0.0""#);
        check(r#"cidrnetmask("10.0.0.0/0")"#, r#""0.0.0.0""#);
        check(r#"cidrnetmask("10.0.0.0/32")"#, r#""255.255.255.255""#);
    }

    #[test]
    fn cidrsubnet_and_subnets() {
        check(r#"cidrsubnet("172.16.0.0/12", 4, 2)"#, r#""172.18.0.0/16""#);
        check(r#"cidrsubnet("10.1.2.0/24", 4, 15)"#, r#""10.1.2.240/28""#);
        check(
            r#"cidrsubnet("fd00:fd12:3456:7890::/56", 16, 162)"#,
            r#""fd00:fd12:3456:7800:a200::/72""#,
        );
        check_err(
            r#"cidrsubnet("10.0.0.0/24", 9, 0)"#,
            "insufficient address space to extend prefix of 24 by 9",
        );
        check_err(
            r#"cidrsubnet("10.0.0.0/24", 2, 4)"#,
            "prefix extension of 2 does not accommodate a subnet numbered 4",
        );
        check(
            r#"cidrsubnets("10.1.0.0/16", 4, 4, 8, 4)"#,
            r#"["10.1.0.0/20", "10.1.16.0/20", "10.1.32.0/24", "10.1.48.0/20"]"#,
        );
        check(
            r#"cidrsubnets("fd00:fd12:3456:7890::/56", 16, 16, 16, 32)"#,
            r#"["fd00:fd12:3456:7800::/72", "fd00:fd12:3456:7800:100::/72", "fd00:fd12:3456:7800:200::/72", "fd00:fd12:3456:7800:300::/88"]"#,
        );
        check(
            r#"cidrsubnets("0.0.0.0/0", 1, 1)"#,
            r#"["0.0.0.0/1", "128.0.0.0/1"]"#,
        );
        check_err(
            r#"cidrsubnets("10.0.0.0/30", 1, 1, 1)"#,
            "not enough remaining address space",
        );
    }
}
