//! Volume specification files, the HCL given to `nomad volume register FILE` and
//! `nomad volume create FILE`, read by their `type` into a [`CSIVolume`] (`type = "csi"`) or a
//! dynamic [`HostVolume`] (`type = "host"`). Plain HCL attributes and blocks at the top level of the
//! file (no `variable`, `locals` or `-var`: Nomad does not take them in volume files either). A
//! parse returns a volume that passed its validation, or every error found, each at
//! file:line:col.

use crate::agent::hcl1;
use crate::eval::Scope;
use crate::parse::syntax_error;
use crate::reader::{did_you_mean, scalar_text, DecodeCx, Reader};
use crate::source::{Diagnostic, Diagnostics, SourceFile, Span};
use crate::tree::{Attr, Block, Body, Builder};
use hcl::Value;
use model::csi::{
    CSITopology, CSITopologyRequest, CSIVolume, CSIVolumeCapability, CSI_ACCESS_MODES,
    CSI_ATTACHMENT_MODES,
};
use model::group::CsiMountOptions;
use model::host_volume::{HostVolume, HostVolumeCapability};
use model::{Operand, Path, ValidationErrors};
use std::cell::RefCell;
use std::collections::BTreeMap;

/// A volume specification, by its `type`.
#[derive(Debug, Clone, PartialEq)]
pub enum VolumeSpec {
    /// `type = "csi"`: a volume of a CSI plugin.
    Csi(Box<CSIVolume>),
    /// `type = "host"`: a dynamic host volume, made on a node by a host volume plugin (create) or
    /// an existing directory there (register).
    Host(Box<HostVolume>),
}

impl VolumeSpec {
    /// `csi` or `host`.
    pub fn kind(&self) -> &'static str {
        match self {
            VolumeSpec::Csi(_) => "csi",
            VolumeSpec::Host(_) => "host",
        }
    }
}

/// The access modes of a host volume capability (Nomad's `HostVolumeAccessMode`).
pub const HOST_ACCESS_MODES: [&str; 4] = [
    "single-node-reader-only",
    "single-node-writer",
    "single-node-single-writer",
    "single-node-multi-writer",
];
/// The attachment modes of a host volume capability (Nomad's `HostVolumeAttachmentMode`).
pub const HOST_ATTACHMENT_MODES: [&str; 2] = ["file-system", "block-device"];

/// What a CSI volume takes and a host volume does not: refused by name in a host spec.
const CSI_ONLY: [&str; 7] = [
    "external_id",
    "snapshot_id",
    "clone_id",
    "secrets",
    "context",
    "mount_options",
    "topology_request",
];

/// Reads a CSI volume specification file from disk (a host volume's is an error at its `type`;
/// [`parse_volume_spec_file`] reads either).
pub fn parse_volume_file(path: &std::path::Path) -> Result<CSIVolume, Diagnostics> {
    let (name, text) = read(path)?;
    parse_volume_str(&text, &name)
}

/// Reads a CSI volume specification from text; `filename` is used in error positions.
pub fn parse_volume_str(text: &str, filename: &str) -> Result<CSIVolume, Diagnostics> {
    // A parse for csi only ever decodes a CSI volume (a host spec is an error at its `type`).
    match parse(text, filename, Some("csi"))? {
        VolumeSpec::Csi(v) => Ok(*v),
        VolumeSpec::Host(_) => Err(Diagnostics(vec![Diagnostic {
            file: filename.to_string(),
            location: None,
            subject: "type".into(),
            message: "a host volume specification, where only a CSI volume is read".into(),
        }])),
    }
}

/// Reads a volume specification file (CSI or host, by its `type`) from disk.
pub fn parse_volume_spec_file(path: &std::path::Path) -> Result<VolumeSpec, Diagnostics> {
    let (name, text) = read(path)?;
    parse_volume_spec_str(&text, &name)
}

/// Reads a volume specification (CSI or host, by its `type`) from text; `filename` is used in
/// error positions.
pub fn parse_volume_spec_str(text: &str, filename: &str) -> Result<VolumeSpec, Diagnostics> {
    parse(text, filename, None)
}

fn read(path: &std::path::Path) -> Result<(String, String), Diagnostics> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: name.clone(),
            location: None,
            subject: String::new(),
            message: format!("cannot read the volume file: {e}"),
        }])
    })?;
    Ok((name, text))
}

/// Parses and decodes by the file's `type`; `only` names the one type the caller takes (the
/// other is an error at `type`).
fn parse(text: &str, filename: &str, only: Option<&str>) -> Result<VolumeSpec, Diagnostics> {
    let file = SourceFile::new(filename, text);
    let (tree, mut diags) = match hcl::edit::parser::parse_body(&file.text) {
        Ok(body) => {
            let mut b = Builder::new(&file);
            (b.body(&body, &Scope::new(), &Path::root()), b.diags)
        }
        Err(e) => {
            let first = syntax_error(&file, &e);
            hcl1_tree(&file).ok_or_else(|| Diagnostics(vec![first]))?
        }
    };
    let written = tree
        .attrs
        .iter()
        .find(|a| a.name == "type")
        .and_then(|a| scalar_text(&a.value))
        .map(|t| t.to_ascii_lowercase());
    let host = written.as_deref() == Some("host") && only != Some("csi");
    let cx = RefCell::new(DecodeCx {
        file: &file,
        diags: Diagnostics::default(),
        spans: BTreeMap::new(),
    });
    let mut reader = Reader::new(&tree, Path::root(), 0..0, &cx);
    let spec = if host {
        VolumeSpec::Host(Box::new(decode_host(&mut reader)))
    } else {
        VolumeSpec::Csi(Box::new(decode_volume(&mut reader, only.is_some())))
    };
    reader.finish();
    let cx = cx.into_inner();
    diags.0.extend(cx.diags.0);
    if !diags.is_empty() {
        return Err(diags);
    }
    match &spec {
        VolumeSpec::Csi(v) => v
            .validate()
            .map_err(|errs| locate(&file, &cx.spans, &errs))?,
        // Everything it checks was checked (and located) while decoding; anything else it finds
        // is reported at the top of the file.
        VolumeSpec::Host(v) => v
            .validate()
            .map_err(|e| Diagnostics(vec![file.diagnostic(Some(&(0..0)), String::new(), e)]))?,
    }
    Ok(spec)
}

/// Nomad reads volume files as HCL1, and its documented examples use HCL1 forms HCL2 rejects
/// (`topology { segments { "rack" = "R1", "zone" = "us-east-1a" } }`). Rewrites them as the agent
/// config reader does, evaluates the result, splices the rewritten one-line bodies back into blocks
/// (every object in a volume spec is a block or a map, and maps read either way), and maps spans
/// back to the original text. `None` when the file is not HCL1 either.
fn hcl1_tree(file: &SourceFile) -> Option<(Body, Diagnostics)> {
    let normalized = hcl1::normalize(&file.text).ok()?;
    let body = hcl::edit::parser::parse_body(&normalized.text).ok()?;
    let rewritten = SourceFile::new(file.name.clone(), normalized.text.clone());
    let mut b = Builder::new(&rewritten);
    let mut tree = b.body(&body, &Scope::new(), &Path::root());
    restore(&mut tree, &normalized.map);
    Some((tree, b.diags))
}

fn restore(body: &mut Body, map: &hcl1::SourceMap) {
    let back = |s: &Span| map.to_original(s.start)..map.to_original(s.end);
    body.span = back(&body.span);
    let attrs = std::mem::take(&mut body.attrs);
    for mut a in attrs {
        a.span = back(&a.span);
        match (a.name.starts_with(hcl1::WRAP_PREFIX), a.value) {
            (true, Value::Object(items)) => {
                for (k, v) in items {
                    splice(body, k, v, &a.span);
                }
            }
            (_, value) => {
                a.value = value;
                body.attrs.push(a);
            }
        }
    }
    for blk in &mut body.blocks {
        blk.span = back(&blk.span);
        restore(&mut blk.body, map);
    }
}

/// One item of a rewritten body: an object becomes a block, anything else an attribute.
fn splice(body: &mut Body, name: String, value: Value, span: &Span) {
    match value {
        Value::Object(items) => {
            let mut inner = Body {
                span: span.clone(),
                ..Body::default()
            };
            for (k, v) in items {
                splice(&mut inner, k, v, span);
            }
            body.blocks.push(Block {
                kind: name,
                labels: Vec::new(),
                body: inner,
                span: span.clone(),
            });
        }
        value => body.attrs.push(Attr {
            name,
            value,
            span: span.clone(),
            failed: false,
            object_literal: false,
        }),
    }
}

/// Validation errors as diagnostics at the attribute (or nearest enclosing block) they are about.
fn locate(
    file: &SourceFile,
    spans: &BTreeMap<String, Span>,
    errors: &ValidationErrors,
) -> Diagnostics {
    let span_of = |path: &Path| {
        let mut text = path.to_string();
        loop {
            if let Some(span) = spans.get(&text) {
                return span.clone();
            }
            match [text.rfind('.'), text.rfind('[')]
                .into_iter()
                .flatten()
                .max()
            {
                Some(cut) => text.truncate(cut),
                None => return 0..0,
            }
        }
    };
    Diagnostics(
        errors
            .errors
            .iter()
            .map(|e| file.diagnostic(Some(&span_of(&e.path)), e.path.to_string(), &e.message))
            .collect(),
    )
}

/// A CSI volume; `csi_only` when the caller takes nothing else (a host spec is then an error at its
/// `type`).
fn decode_volume(r: &mut Reader, csi_only: bool) -> CSIVolume {
    match r.string("type") {
        None if csi_only => r.field_error("type", "type is required: write type = \"csi\""),
        None => r.field_error(
            "type",
            "type is required: write type = \"csi\" or type = \"host\"",
        ),
        Some(t) if t.eq_ignore_ascii_case("csi") => {}
        Some(t) if csi_only && t.eq_ignore_ascii_case("host") => r.field_error(
            "type",
            "this is a host volume specification, and only a CSI volume is read here; got \"host\", write type = \"csi\"",
        ),
        Some(t) => r.field_error(
            "type",
            format!(
                "unknown volume type {t:?}{}; write type = \"csi\" or type = \"host\"",
                did_you_mean(&t.to_ascii_lowercase(), ["csi", "host"].into_iter())
            ),
        ),
    }
    let id = r.string_or_empty("id");
    if id.is_empty() {
        r.field_error(
            "id",
            "id is required: the volume's unique ID, which a job's volume block names as its source (id = \"database\")",
        );
    }
    let plugin_id = r.string_or_empty("plugin_id");
    if plugin_id.is_empty() {
        r.field_error(
            "plugin_id",
            "plugin_id is required: the ID of the CSI plugin that manages this volume, as its job's csi_plugin block names it",
        );
    }
    let capacity_min = capacity(r, "capacity_min");
    let capacity_max = capacity(r, "capacity_max");
    if let (Some((min, min_text)), Some((max, max_text))) = (&capacity_min, &capacity_max) {
        if min > max {
            r.field_error(
                "capacity_max",
                format!(
                    "capacity_min {min_text:?} ({min} bytes) is more than capacity_max {max_text:?} ({max} bytes); lower capacity_min or raise capacity_max"
                ),
            );
        }
    }
    CSIVolume {
        id,
        plugin_id,
        name: r.string_or_empty("name"),
        namespace: r.string_or_empty("namespace"),
        external_id: r.string_or_empty("external_id"),
        snapshot_id: r.string_or_empty("snapshot_id"),
        clone_id: r.string_or_empty("clone_id"),
        requested_capacity_min: capacity_min.map_or(0, |(n, _)| n),
        requested_capacity_max: capacity_max.map_or(0, |(n, _)| n),
        requested_capabilities: capabilities(r),
        mount_options: r.block("mount_options").map(|b| {
            let mut m = r.child(b, r.path.field("mount_options"));
            let opts = CsiMountOptions {
                fs_type: m.string_or_empty("fs_type"),
                mount_flags: m.strings("mount_flags"),
            };
            m.finish();
            opts
        }),
        secrets: r.string_map("secrets"),
        parameters: r.string_map("parameters"),
        context: r.string_map("context"),
        requested_topologies: r.block("topology_request").map(|b| {
            let mut t = r.child(b, r.path.field("topology_request"));
            let req = CSITopologyRequest {
                required: topologies(&mut t, "required"),
                preferred: topologies(&mut t, "preferred"),
            };
            t.finish();
            req
        }),
        ..CSIVolume::default()
    }
}

/// A dynamic host volume (Nomad's `decodeHostVolume`): every problem reported at its field.
fn decode_host(r: &mut Reader) -> HostVolume {
    r.string("type");
    for name in CSI_ONLY {
        let message = format!(
            "{name} is for CSI volumes only, and a host volume (type = \"host\") does not take it; remove it, or write type = \"csi\""
        );
        if r.attr(name).is_some() {
            r.field_error(name, &message);
        }
        for b in r.blocks(name) {
            r.error_at(Some(&b.span), &r.path.field(name), &message);
        }
    }
    let id = r.string_or_empty("id");
    if !id.is_empty() && !is_uuid(&id) {
        r.field_error(
            "id",
            format!(
                "invalid volume ID {id:?}: id names an existing volume to update (a UUID such as \"2f2a6a3c-3c7b-4f0e-9d43-0e9d2b1c0a11\"); leave it out to create a new volume"
            ),
        );
    }
    let name = r.string_or_empty("name");
    if name.is_empty() {
        r.field_error(
            "name",
            "name is required: the name a job's volume block gives as its source (name = \"data\")",
        );
    } else if name.len() > 128 || name.contains(['/', '\0']) {
        r.field_error(
            "name",
            format!("invalid name {name:?}: at most 128 bytes, without \"/\""),
        );
    }
    let capacity_min = capacity(r, "capacity_min");
    let capacity_max = capacity(r, "capacity_max");
    if let (Some((min, min_text)), Some((max, max_text))) = (&capacity_min, &capacity_max) {
        if max != &0 && min > max {
            r.field_error(
                "capacity_max",
                format!(
                    "capacity_min {min_text:?} ({min} bytes) is more than capacity_max {max_text:?} ({max} bytes); lower capacity_min or raise capacity_max"
                ),
            );
        }
    }
    let capacity_bytes = capacity(r, "capacity").map_or(0, |(n, _)| n);
    let mut requested_capabilities = Vec::new();
    for (i, b) in r.blocks("capability").into_iter().enumerate() {
        let mut c = r.child(b, r.path.field("capability").index(i));
        let access_mode = mode(&mut c, "access_mode", &HOST_ACCESS_MODES);
        let attachment_mode = mode(&mut c, "attachment_mode", &HOST_ATTACHMENT_MODES);
        c.finish();
        requested_capabilities.push(HostVolumeCapability {
            attachment_mode,
            access_mode,
        });
    }
    let mut constraints = Vec::new();
    for (i, b) in r.blocks("constraint").into_iter().enumerate() {
        let mut c = r.child(b, r.path.field("constraint").index(i));
        let rule = crate::decode::constraint(&mut c);
        match Operand::parse(&rule.operand) {
            None => c.field_error(
                "operator",
                format!("unknown operator {:?}", rule.operand),
            ),
            Some(op) if op.constraint_only() => c.field_error(
                "operator",
                format!(
                    "{} cannot be used in a host volume: volumes of the same name are always on distinct hosts",
                    rule.operand
                ),
            ),
            Some(_) => {}
        }
        c.finish();
        constraints.push(rule);
    }
    let parameters = r.string_map("parameters");
    HostVolume {
        id,
        name,
        namespace: r.string_or_empty("namespace"),
        plugin_id: r.string_or_empty("plugin_id"),
        node_id: r.string_or_empty("node_id"),
        node_pool: r.string_or_empty("node_pool"),
        host_path: r.string_or_empty("host_path"),
        requested_capacity_min_bytes: capacity_min.map_or(0, |(n, _)| n),
        requested_capacity_max_bytes: capacity_max.map_or(0, |(n, _)| n),
        capacity_bytes,
        requested_capabilities,
        constraints: (!constraints.is_empty()).then_some(constraints),
        parameters: (!parameters.is_empty()).then_some(parameters),
        ..HostVolume::default()
    }
}

/// A UUID as Nomad writes them: 8-4-4-4-12 hex digits.
fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// A size in bytes and the text it was read from; `None` when unset or invalid (reported).
fn capacity(r: &mut Reader, name: &'static str) -> Option<(i64, String)> {
    let text = r.string(name)?;
    match parse_bytes(&text) {
        Ok(n) => Some((n, text)),
        Err(e) => {
            r.field_error(name, e);
            None
        }
    }
}

/// go-humanize's `ParseBytes`, as Nomad reads capacities: a number with an optional unit, where
/// `k`/`kb`/`M`/`GB`/… are powers of 1000 and `KiB`/`Mi`/`GiB`/… powers of 1024, case-insensitive.
pub fn parse_bytes(text: &str) -> Result<i64, String> {
    let digits = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(digits);
    let bad = || {
        format!(
            "invalid size {text:?}: expected a number of bytes with an optional unit, such as \"10GiB\", \"500M\" or \"1073741824\""
        )
    };
    let value: f64 = num.replace(',', "").parse().map_err(|_| bad())?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit.strip_suffix('b').unwrap_or(&unit);
    let (prefix, binary) = match unit.strip_suffix('i') {
        Some(p) if !p.is_empty() => (p, true),
        _ => (unit, false),
    };
    let power = match prefix {
        "" if !binary => 0,
        "k" => 1,
        "m" => 2,
        "g" => 3,
        "t" => 4,
        "p" => 5,
        "e" => 6,
        _ => return Err(bad()),
    };
    let base: f64 = if binary { 1024.0 } else { 1000.0 };
    let bytes = value * base.powi(power);
    if bytes >= 9.223_372_036_854_775e18 {
        return Err(format!("size {text:?} is too large"));
    }
    Ok(bytes as i64)
}

fn capabilities(r: &mut Reader) -> Vec<CSIVolumeCapability> {
    let blocks = r.blocks("capability");
    let mut out = Vec::new();
    for (i, b) in blocks.into_iter().enumerate() {
        let mut c = r.child(b, r.path.field("capability").index(i));
        let access_mode = mode(&mut c, "access_mode", &CSI_ACCESS_MODES);
        let attachment_mode = mode(&mut c, "attachment_mode", &CSI_ATTACHMENT_MODES);
        c.finish();
        out.push(CSIVolumeCapability {
            access_mode,
            attachment_mode,
        });
    }
    out
}

/// A required attribute whose value must be one of `valid`.
fn mode(r: &mut Reader, name: &'static str, valid: &[&str]) -> String {
    let list = valid.join(", ");
    match r.string(name) {
        None => {
            r.field_error(name, format!("{name} is required; one of {list}"));
            String::new()
        }
        Some(m) if valid.contains(&m.as_str()) => m,
        Some(m) => {
            r.field_error(
                name,
                format!(
                    "unknown {} {m:?}{}; expected one of {list}",
                    name.replace('_', " "),
                    did_you_mean(&m, valid.iter().copied())
                ),
            );
            m
        }
    }
}

/// The `topology { segments { … } }` blocks of a `required` or `preferred` block.
fn topologies(r: &mut Reader, kind: &'static str) -> Vec<CSITopology> {
    let Some(b) = r.block(kind) else {
        return Vec::new();
    };
    let mut k = r.child(b, r.path.field(kind));
    let mut out = Vec::new();
    for (i, t) in k.blocks("topology").into_iter().enumerate() {
        let mut tr = k.child(t, k.path.field("topology").index(i));
        out.push(CSITopology {
            segments: tr.string_map("segments"),
        });
        tr.finish();
    }
    k.finish();
    out
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_read_like_go_humanize() {
        assert_eq!(parse_bytes("10GiB"), Ok(10 << 30));
        assert_eq!(parse_bytes("1G"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("200 gb"), Ok(200_000_000_000));
        assert_eq!(parse_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_bytes("1,024"), Ok(1024));
        assert_eq!(parse_bytes("1.5 KiB"), Ok(1536));
        assert_eq!(parse_bytes("42"), Ok(42));
        assert_eq!(parse_bytes("7b"), Ok(7));
        assert!(parse_bytes("10 GiBs").is_err());
        assert!(parse_bytes("i").is_err());
        assert!(parse_bytes("GiB").is_err());
        assert!(parse_bytes("20EiB").unwrap_err().contains("too large"));
    }
}
