//! Stage 1, sampling: the BPF sampler on every CPU ([`sampler`]) and the
//! parsing of what it sends ([`record`]).

pub mod record;
pub mod sampler;
