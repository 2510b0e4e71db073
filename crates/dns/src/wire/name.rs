//! Domain names: their wire form (length-prefixed labels ending with the
//! root's zero octet), read from a message with decompression bounded
//! against loops and overruns, built from text or labels, and compared
//! ASCII-case-insensitively as DNS requires (RFC 4343). A [`Name`] is
//! immutable and cheap to clone (shared bytes), since the same owner or
//! target appears in many records of an answer.

use std::fmt;
use std::sync::Arc;

use super::WireError;

/// The longest label (RFC 1035 §2.3.4).
pub const MAX_LABEL: usize = 63;
/// The longest name in wire form, length octets and root included.
pub const MAX_NAME: usize = 255;
/// Compression pointers followed while reading one name. A name of 255
/// octets has at most 127 labels, so a legal name never needs more.
const MAX_POINTERS: usize = 127;

/// A domain name in uncompressed wire form, case kept as given.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Name(Arc<[u8]>);

impl Name {
    /// The root, `.`.
    pub fn root() -> Name {
        Name(Arc::from(&[0u8][..]))
    }

    /// A name from dotted text (`web.default.svc.cluster.local`, trailing
    /// dot optional; `.` or "" is the root). No escapes: the names this
    /// server makes are Kubernetes names, and configuration is validated
    /// with this parser.
    pub fn from_text(text: &str) -> Result<Name, WireError> {
        let text = text.strip_suffix('.').unwrap_or(text);
        if text.is_empty() {
            return Ok(Name::root());
        }
        Name::from_labels(text.split('.').map(str::as_bytes))
    }

    /// A name from its labels, most specific first.
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = &'a [u8]>) -> Result<Name, WireError> {
        let mut wire = Vec::with_capacity(32);
        for label in labels {
            push_label(&mut wire, label)?;
        }
        wire.push(0);
        if wire.len() > MAX_NAME {
            return Err(WireError::NameTooLong);
        }
        Ok(Name(Arc::from(wire)))
    }

    /// Wire bytes already checked to be a name (from [`read`]).
    fn from_wire_unchecked(wire: &[u8]) -> Name {
        Name(Arc::from(wire))
    }

    /// The uncompressed wire form.
    pub fn wire(&self) -> &[u8] {
        &self.0
    }

    /// The labels, most specific first (the root's empty label excluded).
    pub fn labels(&self) -> Labels<'_> {
        Labels {
            wire: &self.0,
            at: 0,
        }
    }

    /// How many labels (the root has none).
    pub fn label_count(&self) -> usize {
        self.labels().count()
    }

    pub fn is_root(&self) -> bool {
        self.0.len() == 1
    }

    /// The name with its first `skip` labels removed (`skip` past the end
    /// gives the root).
    pub fn suffix(&self, skip: usize) -> Name {
        let mut at = 0;
        for _ in 0..skip {
            match self.0.get(at) {
                Some(&len) if len != 0 => at += 1 + usize::from(len),
                _ => break,
            }
        }
        Name::from_wire_unchecked(self.0.get(at..).unwrap_or(&[0]))
    }

    /// The same name in lowercase ASCII.
    pub fn to_lowercase(&self) -> Name {
        let mut wire = self.0.to_vec();
        lowercase_wire(&mut wire);
        Name(Arc::from(wire))
    }

    /// Equal but for ASCII case.
    pub fn eq_ignore_case(&self, other: &Name) -> bool {
        self.0.eq_ignore_ascii_case(&other.0)
    }

    /// Whether `self` is `zone` or below it (case-insensitively).
    pub fn is_subdomain_of(&self, zone: &Name) -> bool {
        let (a, z) = (self.wire(), zone.wire());
        if z.len() > a.len() {
            return false;
        }
        // The zone's wire form must be a suffix that starts on a label.
        let start = a.len() - z.len();
        let mut at = 0;
        while at < start {
            at += 1 + usize::from(a[at]);
        }
        at == start && a[start..].eq_ignore_ascii_case(z)
    }
}

/// Lowercases a name's wire form in place (length octets are below `A`,
/// so lowercasing the whole buffer is safe).
pub(crate) fn lowercase_wire(wire: &mut [u8]) {
    wire.make_ascii_lowercase();
}

fn push_label(wire: &mut Vec<u8>, label: &[u8]) -> Result<(), WireError> {
    if label.is_empty() {
        return Err(WireError::EmptyLabel);
    }
    if label.len() > MAX_LABEL {
        return Err(WireError::LabelTooLong(label.len()));
    }
    // Checked above: at most 63.
    wire.push(label.len() as u8);
    wire.extend_from_slice(label);
    if wire.len() + 1 > MAX_NAME {
        return Err(WireError::NameTooLong);
    }
    Ok(())
}

/// The labels of a [`Name`].
#[derive(Debug, Clone)]
pub struct Labels<'a> {
    wire: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Labels<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let len = usize::from(*self.wire.get(self.at)?);
        if len == 0 {
            return None;
        }
        let label = self.wire.get(self.at + 1..self.at + 1 + len)?;
        self.at += 1 + len;
        Some(label)
    }
}

/// Reads the name at `at` in `message`: its uncompressed form and where
/// the bytes after it (in place, not after a pointer's target) begin.
/// Pointers must point strictly before the label that holds them (so every
/// loop is cut), at most [`MAX_POINTERS`] are followed, and the expanded
/// name must fit in 255 octets.
pub fn read(message: &[u8], at: usize) -> Result<(Name, usize), WireError> {
    let mut wire = [0u8; MAX_NAME];
    let mut len = 0;
    let (end, total) = read_into(message, at, &mut wire, &mut len)?;
    debug_assert_eq!(total, len);
    Ok((Name::from_wire_unchecked(&wire[..len]), end))
}

/// Skips the name at `at` without keeping it (still fully validated).
pub fn skip(message: &[u8], at: usize) -> Result<usize, WireError> {
    let mut wire = [0u8; MAX_NAME];
    let mut len = 0;
    read_into(message, at, &mut wire, &mut len).map(|(end, _)| end)
}

fn read_into(
    message: &[u8],
    mut at: usize,
    wire: &mut [u8; MAX_NAME],
    len: &mut usize,
) -> Result<(usize, usize), WireError> {
    let mut end = None;
    let mut pointers = 0;
    loop {
        let &octet = message.get(at).ok_or(WireError::Truncated(at))?;
        match octet & 0xC0 {
            0x00 => {
                let label = usize::from(octet);
                if *len + 1 + label > MAX_NAME {
                    return Err(WireError::NameTooLong);
                }
                if label == 0 {
                    wire[*len] = 0;
                    *len += 1;
                    let end = end.unwrap_or(at + 1);
                    return Ok((end, *len));
                }
                let bytes = message
                    .get(at + 1..at + 1 + label)
                    .ok_or(WireError::Truncated(at))?;
                wire[*len] = octet;
                wire[*len + 1..*len + 1 + label].copy_from_slice(bytes);
                *len += 1 + label;
                at += 1 + label;
            }
            0xC0 => {
                let &low = message.get(at + 1).ok_or(WireError::Truncated(at))?;
                let target = usize::from(octet & 0x3F) << 8 | usize::from(low);
                pointers += 1;
                if target >= at || pointers > MAX_POINTERS {
                    return Err(WireError::BadPointer(at));
                }
                end.get_or_insert(at + 2);
                at = target;
            }
            _ => return Err(WireError::BadLabelType(at)),
        }
    }
}

impl fmt::Display for Name {
    /// Presentation form with the trailing dot; `.` and bytes outside
    /// printable ASCII escaped as in zone files (`\.`, `\032`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() {
            return f.write_str(".");
        }
        for label in self.labels() {
            for &b in label {
                match b {
                    b'.' | b'\\' => write!(f, "\\{}", b as char)?,
                    0x21..=0x7E => write!(f, "{}", b as char)?,
                    _ => write!(f, "\\{b:03}")?,
                }
            }
            f.write_str(".")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Name({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_limits_hold() {
        let name = Name::from_text("Web.default.svc.cluster.local.").expect("a valid name");
        assert_eq!(name.to_string(), "Web.default.svc.cluster.local.");
        assert_eq!(name.label_count(), 5);
        assert_eq!(Name::from_text("").expect("a valid name"), Name::root());
        assert_eq!(Name::from_text(".").expect("a valid name").to_string(), ".");
        assert_eq!(
            Name::from_text(&"a".repeat(64)),
            Err(WireError::LabelTooLong(64))
        );
        assert_eq!(Name::from_text("a..b"), Err(WireError::EmptyLabel));
        // 127 labels of one octet: 254 octets with the root, the most.
        let longest = vec!["a"; 127].join(".");
        assert_eq!(
            Name::from_text(&longest)
                .expect("a valid name")
                .wire()
                .len(),
            255
        );
        let too_long = vec!["a"; 128].join(".");
        assert_eq!(Name::from_text(&too_long), Err(WireError::NameTooLong));
    }

    #[test]
    fn suffixes_and_subdomains_ignore_case() {
        let name = Name::from_text("a.B.cluster.LOCAL").expect("a valid name");
        let zone = Name::from_text("cluster.local").expect("a valid name");
        assert!(name.is_subdomain_of(&zone));
        assert!(zone.is_subdomain_of(&zone));
        assert!(
            !Name::from_text("xcluster.local")
                .expect("a valid name")
                .is_subdomain_of(&zone)
        );
        assert!(!zone.is_subdomain_of(&name));
        assert!(name.is_subdomain_of(&Name::root()));
        assert_eq!(name.suffix(2).to_string(), "cluster.LOCAL.");
        assert_eq!(name.suffix(9), Name::root());
        assert!(name.suffix(2).eq_ignore_case(&zone));
    }

    #[test]
    fn compressed_names_are_read_and_loops_refused() {
        // "cluster.local" at 0, then "svc" + pointer to 0 at 15.
        let mut msg = b"\x07cluster\x05local\x00".to_vec();
        msg.extend_from_slice(b"\x03svc\xC0\x00");
        let (name, end) = read(&msg, 15).expect("a name");
        assert_eq!(name.to_string(), "svc.cluster.local.");
        assert_eq!(end, msg.len());
        // A pointer to itself, and one pointing forwards.
        assert_eq!(read(b"\xC0\x00", 0), Err(WireError::BadPointer(0)));
        assert_eq!(read(b"\x01a\xC0\x04\x00", 2), Err(WireError::BadPointer(2)));
        // Reserved label types, and running off the end.
        assert_eq!(read(b"\x40", 0), Err(WireError::BadLabelType(0)));
        assert_eq!(read(b"\x03ab", 0), Err(WireError::Truncated(0)));
        assert_eq!(read(b"", 0), Err(WireError::Truncated(0)));
        // Pointers that each point back to a longer name blow the limit.
        let mut msg = vec![63];
        msg.extend_from_slice(&[b'x'; 63]);
        msg.push(0);
        for i in 0..5 {
            let prev = if i == 0 { 0 } else { 65 + (i - 1) * 66 };
            msg.push(63);
            msg.extend_from_slice(&[b'y'; 63]);
            msg.extend_from_slice(&[0xC0 | (prev >> 8) as u8, (prev & 0xFF) as u8]);
        }
        assert_eq!(read(&msg, 65 + 3 * 66), Err(WireError::NameTooLong));
    }
}
