//! Stage 1, sampling: the BPF sampler on every CPU ([`sampler`]) and the
//! parsing of the records it sends through its ring buffer
//! ([`ring_record`]).

pub mod ring_record;
pub mod sampler;
