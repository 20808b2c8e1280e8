//! The names a client certificate stands for, matched against
//! `server.tls_client_names`: its DNS subject alternative names and its subject's
//! common names. Only certificates that already passed the TLS handshake's chain
//! verification get here, but their bytes still come from the network: nothing in
//! this module may panic on malformed input (a bad encoding yields fewer names).

use rustls_pki_types::CertificateDer;

/// DNS SANs first, then CNs; duplicates removed.
pub fn names(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok(ee) = webpki::EndEntityCert::try_from(cert) else {
        return Vec::new();
    };
    let mut out: Vec<String> = ee.valid_dns_names().map(str::to_string).collect();
    for cn in common_names(ee.subject()) {
        if !out.contains(&cn) {
            out.push(cn);
        }
    }
    out
}

/// id-at-commonName, 2.5.4.3, as DER OID content bytes.
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const TAG_SET: u8 = 0x31;
const TAG_SEQUENCE: u8 = 0x30;
const TAG_OID: u8 = 0x06;
const TAG_UTF8: u8 = 0x0c;
const TAG_PRINTABLE: u8 = 0x13;
const TAG_IA5: u8 = 0x16;

/// The CN values of a DER `Name` given without its outer SEQUENCE header (as
/// webpki's `Cert::subject` returns it): SET OF SEQUENCE { OID, value }.
pub fn common_names(mut rdns: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    while let Some((tag, set, rest)) = tlv(rdns) {
        rdns = rest;
        if tag != TAG_SET {
            break;
        }
        let mut set = set;
        while let Some((tag, atv, rest)) = tlv(set) {
            set = rest;
            if tag != TAG_SEQUENCE {
                break;
            }
            let Some((TAG_OID, oid, value)) = tlv(atv) else {
                continue;
            };
            if oid != OID_CN {
                continue;
            }
            if let Some((TAG_UTF8 | TAG_PRINTABLE | TAG_IA5, v, _)) = tlv(value) {
                if let Ok(s) = std::str::from_utf8(v) {
                    out.push(s.to_string());
                }
            }
        }
    }
    out
}

/// One DER element: (tag, contents, what follows). Single-byte tags and definite
/// lengths of up to four bytes only; anything else ends the walk.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let (bytes, after) = (rest.get(..n)?, rest.get(n..)?);
        rest = after;
        bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
    };
    let contents = rest.get(..len)?;
    Some((tag, contents, rest.get(len..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atv(oid: &[u8], tag: u8, v: &[u8]) -> Vec<u8> {
        let mut inner = vec![TAG_OID, oid.len() as u8];
        inner.extend_from_slice(oid);
        inner.extend_from_slice(&[tag, v.len() as u8]);
        inner.extend_from_slice(v);
        let mut seq = vec![TAG_SEQUENCE, inner.len() as u8];
        seq.extend(inner);
        let mut set = vec![TAG_SET, seq.len() as u8];
        set.extend(seq);
        set
    }

    #[test]
    fn finds_every_common_name_and_skips_other_attributes() {
        let o = [0x55, 0x04, 0x0a]; // organizationName
        let mut name = atv(&o, TAG_UTF8, b"jp org");
        name.extend(atv(OID_CN, TAG_UTF8, b"ops-1"));
        name.extend(atv(OID_CN, TAG_PRINTABLE, b"ops 2"));
        assert_eq!(common_names(&name), ["ops-1", "ops 2"]);
    }

    #[test]
    fn malformed_input_gives_what_was_read_before_it() {
        let good = atv(OID_CN, TAG_UTF8, b"a");
        assert_eq!(common_names(&[]), Vec::<String>::new());
        // Truncated anywhere: no panic, no name from the broken part.
        for cut in 0..good.len() {
            let mut n = good.clone();
            n.extend_from_slice(&good[..cut]);
            assert_eq!(common_names(&n), ["a"], "cut at {cut}");
        }
        // A length that claims more than there is, long-form lengths, a multi-byte tag.
        assert!(common_names(&[TAG_SET, 0x84, 0xff, 0xff, 0xff, 0xff, 0]).is_empty());
        assert!(common_names(&[TAG_SET, 0x80]).is_empty());
        assert!(common_names(&[0x1f, 0x01, 0x00]).is_empty());
        // A BMPString CN is not decoded (no such client names in practice).
        assert!(common_names(&atv(OID_CN, 0x1e, &[0, b'a'])).is_empty());
    }

    #[test]
    fn long_form_lengths() {
        let v = vec![b'x'; 200];
        let mut inner = vec![TAG_OID, 3, 0x55, 0x04, 0x03, TAG_UTF8, 0x81, 200];
        inner.extend_from_slice(&v);
        let mut seq = vec![TAG_SEQUENCE, 0x81, inner.len() as u8];
        seq.extend(inner);
        let mut set = vec![TAG_SET, 0x81, seq.len() as u8];
        set.extend(seq);
        assert_eq!(common_names(&set), [String::from_utf8(v).unwrap()]);
    }

    #[test]
    fn not_a_certificate() {
        assert!(names(&CertificateDer::from(vec![1, 2, 3])).is_empty());
    }
}
