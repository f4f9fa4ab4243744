//! The parts of Kubernetes' own pod validation that a CloneSet template or
//! a SidecarSet container must pass, checked at the door: otherwise the
//! CloneSet or SidecarSet is stored and every pod it makes is refused by
//! the API server. Messages are the API server's, under the field of the
//! CloneSet or SidecarSet.
//!
//! Checked: ports (numbers, protocols, names), probes (one handler, its
//! port, non-negative timings, `successThreshold` 1 where Kubernetes wants
//! it), and resources (quantities, none negative, requests within limits).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ExecAction, Probe, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::quantity::Quantity;
use crate::validation::Violation;

const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const PORT_NAME_MAX_LENGTH: usize = 15;

/// Every violation of `container`, whose field path is `field`
/// (`spec.template.spec.containers[0]`).
pub fn check_container(container: &Container, field: &str, out: &mut Vec<Violation>) {
    check_ports(container.ports.as_deref().unwrap_or_default(), field, out);
    let probes = [
        ("livenessProbe", &container.liveness_probe, true),
        ("readinessProbe", &container.readiness_probe, false),
        ("startupProbe", &container.startup_probe, true),
    ];
    for (name, probe, success_must_be_one) in probes {
        if let Some(probe) = probe {
            check_probe(probe, &format!("{field}.{name}"), success_must_be_one, out);
        }
    }
    if let Some(resources) = &container.resources {
        check_resources(resources, &format!("{field}.resources"), out);
    }
}

fn check_ports(ports: &[ContainerPort], field: &str, out: &mut Vec<Violation>) {
    let mut names = BTreeSet::new();
    for (index, port) in ports.iter().enumerate() {
        let field = format!("{field}.ports[{index}]");
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            if let Some(message) = port_name_error(name) {
                out.push(invalid(
                    &format!("{field}.name"),
                    &format!("{name:?}"),
                    &message,
                ));
            } else if !names.insert(name) {
                out.push(Violation::new(
                    format!("{field}.name"),
                    format!("Duplicate value: {name:?}"),
                ));
            }
        }
        if port.container_port == 0 {
            out.push(Violation::new(
                format!("{field}.containerPort"),
                "Required value",
            ));
        } else {
            check_port_number(port.container_port, &format!("{field}.containerPort"), out);
        }
        if let Some(host_port) = port.host_port.filter(|p| *p != 0) {
            check_port_number(host_port, &format!("{field}.hostPort"), out);
        }
        // Unset is defaulted to TCP by the API server.
        let protocol = port.protocol.as_deref().unwrap_or_default();
        if !protocol.is_empty() && !PROTOCOLS.contains(&protocol) {
            out.push(Violation::new(
                format!("{field}.protocol"),
                format!(
                    "Unsupported value: {protocol:?}: supported values: \"SCTP\", \"TCP\", \"UDP\""
                ),
            ));
        }
    }
}

fn check_port_number(port: i32, field: &str, out: &mut Vec<Violation>) {
    if !(1..=65535).contains(&port) {
        out.push(invalid(
            field,
            &port.to_string(),
            "must be between 1 and 65535, inclusive",
        ));
    }
}

/// Why `name` is not an IANA service name (Kubernetes' `IsValidPortName`),
/// every reason joined as the API server joins them.
fn port_name_error(name: &str) -> Option<String> {
    let mut reasons = Vec::new();
    if name.len() > PORT_NAME_MAX_LENGTH {
        reasons.push(format!(
            "must be no more than {PORT_NAME_MAX_LENGTH} characters"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        reasons
            .push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if name.contains("--") {
        reasons.push("must not contain consecutive hyphens".into());
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        reasons.push("must contain at least one letter (a-z)".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        reasons.push("must not begin or end with a hyphen".into());
    }
    (!reasons.is_empty()).then(|| reasons.join(","))
}

/// A probe port: a number in range or a port name.
fn check_probe_port(port: &IntOrString, field: &str, out: &mut Vec<Violation>) {
    match port {
        IntOrString::Int(number) => check_port_number(*number, field, out),
        IntOrString::String(name) => {
            if let Some(message) = port_name_error(name) {
                out.push(invalid(field, &format!("{name:?}"), &message));
            }
        }
    }
}

fn check_probe(probe: &Probe, field: &str, success_must_be_one: bool, out: &mut Vec<Violation>) {
    let handlers = [
        ("exec", probe.exec.is_some()),
        ("httpGet", probe.http_get.is_some()),
        ("tcpSocket", probe.tcp_socket.is_some()),
        ("grpc", probe.grpc.is_some()),
    ];
    let set: Vec<&str> = handlers.iter().filter(|h| h.1).map(|h| h.0).collect();
    match set.as_slice() {
        [] => out.push(Violation::new(
            field,
            "Required value: must specify a handler type",
        )),
        [_] => {}
        [_, extra, ..] => out.push(Violation::new(
            format!("{field}.{extra}"),
            "Forbidden: may not specify more than 1 handler type",
        )),
    }
    let no_command = |exec: &ExecAction| exec.command.as_deref().is_none_or(<[String]>::is_empty);
    if probe.exec.as_ref().is_some_and(no_command) {
        out.push(Violation::new(
            format!("{field}.exec.command"),
            "Required value",
        ));
    }
    if let Some(http) = &probe.http_get {
        check_probe_port(&http.port, &format!("{field}.httpGet.port"), out);
        let scheme = http.scheme.as_deref().unwrap_or_default();
        if !scheme.is_empty() && !["HTTP", "HTTPS"].contains(&scheme) {
            out.push(Violation::new(
                format!("{field}.httpGet.scheme"),
                format!("Unsupported value: {scheme:?}: supported values: \"HTTP\", \"HTTPS\""),
            ));
        }
    }
    if let Some(tcp) = &probe.tcp_socket {
        check_probe_port(&tcp.port, &format!("{field}.tcpSocket.port"), out);
    }
    if let Some(grpc) = &probe.grpc {
        check_port_number(grpc.port, &format!("{field}.grpc.port"), out);
    }
    let timings = [
        ("initialDelaySeconds", probe.initial_delay_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ];
    for (name, value) in timings {
        if let Some(value) = value.filter(|v| *v < 0) {
            out.push(invalid(
                &format!("{field}.{name}"),
                &value.to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    // Unset or 0 is defaulted to 1 by the API server.
    let success = probe.success_threshold.unwrap_or(0);
    if success_must_be_one && success > 1 {
        out.push(invalid(
            &format!("{field}.successThreshold"),
            &success.to_string(),
            "must be 1",
        ));
    }
}

fn check_resources(resources: &ResourceRequirements, field: &str, out: &mut Vec<Violation>) {
    let read = |list: &str, name: &str, text: &str, out: &mut Vec<Violation>| {
        let field = format!("{field}.{list}[{name}]");
        match Quantity::parse(text) {
            Err(error) => {
                out.push(invalid(&field, &format!("{text:?}"), &error.to_string()));
                None
            }
            Ok(quantity) if quantity.is_negative() => {
                out.push(invalid(
                    &field,
                    &format!("{text:?}"),
                    "must be greater than or equal to 0",
                ));
                None
            }
            Ok(quantity) => Some(quantity),
        }
    };
    let mut limits = Vec::new();
    for (name, value) in resources.limits.iter().flatten() {
        if let Some(quantity) = read("limits", name, &value.0, out) {
            limits.push((name.as_str(), quantity));
        }
    }
    for (name, value) in resources.requests.iter().flatten() {
        let Some(request) = read("requests", name, &value.0, out) else {
            continue;
        };
        let limit = limits.iter().find(|(limit_name, _)| *limit_name == name);
        if let Some((_, limit)) = limit.filter(|(_, limit)| request > *limit) {
            out.push(invalid(
                &format!("{field}.requests[{name}]"),
                &format!("{:?}", value.0),
                &format!("must be less than or equal to {name} limit of {limit}"),
            ));
        }
    }
}

fn invalid(field: &str, shown: &str, message: &str) -> Violation {
    Violation::new(field, format!("Invalid value: {shown}: {message}"))
}
