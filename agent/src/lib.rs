//! Stoke's JVMTI agent. Empty until Java profiling lands: the crate exists so
//! that the workspace has its final shape and the agent its build.
