//! Interpreted runtimes whose frames the sampler reads from the
//! interpreter's own structures, found and named here: [`python`].

pub mod python;
