//! Arbitrary bytes given to the bundle `decode` never make it panic, and
//! whatever it decodes encodes to a bundle that decodes to the same
//! notifications.

#![no_main]

use bytes::Bytes;
use herald_protocol::bundle::{decode, encode, encoded_len};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(batch) = decode(Bytes::copy_from_slice(data)) {
        let again = encode(&batch);
        assert_eq!(again.len(), encoded_len(&batch));
        assert_eq!(decode(again).as_ref(), Ok(&batch));
    }
});
