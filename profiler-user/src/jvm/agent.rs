//! The agent stoke carries (built from `agent/` by build.rs): loaded into
//! a running JVM, or written out for JVMs started with `-agentpath:`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use profiler_common::jvm::AgentState;

use super::{
    agent_memory::AgentMemory,
    attach::{self, JvmTarget},
};

/// The agent, built from `agent/` by build.rs.
pub static AGENT: &[u8] = include_bytes!(env!("STOKE_AGENT_PATH"));

/// How long a JVM may take to load the agent and report ready.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(5);

/// Loads the agent into `pid` (or finds it loaded) and waits until it is
/// ready for signals.
pub(super) fn attach_agent(pid: u32) -> Result<AgentMemory> {
    let memory = match AgentMemory::find(pid)? {
        Some(memory) => memory,
        None => {
            let target = JvmTarget::inspect(pid)?;
            let path = attach::install_agent(&target, &agent_file_name(), AGENT)?;
            attach::load_agent(&target, &path, "", ATTACH_TIMEOUT)?;
            AgentMemory::find(pid)?.context("the agent loaded but shares no memory")?
        }
    };
    let deadline = Instant::now() + ATTACH_TIMEOUT;
    loop {
        match memory.state() {
            AgentState::Ready => return Ok(memory),
            AgentState::Starting if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            AgentState::Starting => bail!("the agent did not get ready within {ATTACH_TIMEOUT:?}"),
            AgentState::HandlerLost => bail!("the application replaced the agent's signal handler"),
            AgentState::Failed => {
                bail!("the agent could not start in this JVM (the application may use SIGURG)")
            }
        }
    }
}

/// A name that changes with the agent's contents, so that a JVM never
/// loads a stale agent of another stoke version.
fn agent_file_name() -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    AGENT.hash(&mut hasher);
    format!("libstoke_agent-{:016x}.so", hasher.finish())
}
