//! One profile pushed as OTLP/HTTP (protobuf): `POST URL/v1development/profiles`
//! with an `ExportProfilesServiceRequest` holding the service's profile
//! under a resource that names it (see [`crate::write::otlp`]).

use std::{io::Read, time::Duration};

use anyhow::Context;
use flate2::read::GzDecoder;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use prost::Message;

use super::{
    args::OtlpSettings,
    http::{self, Timeouts},
    worker::{Delivery, Destination},
    Batch, ServiceProfile,
};
use crate::{
    process::identity::host_name,
    write::{otlp, pprof::proto},
};

/// The OTLP destination.
pub(super) struct Otlp {
    agent: ureq::Agent,
    settings: OtlpSettings,
    timeouts: Timeouts,
}

impl Otlp {
    pub fn new(settings: OtlpSettings, timeouts: Timeouts) -> Self {
        Self {
            agent: http::agent(timeouts),
            settings,
            timeouts,
        }
    }
}

/// The request that carries `profile`, a service's gzipped pprof (which
/// stoke made), with the static `labels` after the profile's own.
fn request(profile: &ServiceProfile, labels: &[(String, String)]) -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    GzDecoder::new(&profile.pprof[..])
        .read_to_end(&mut bytes)
        .context("unzipping the pprof")?;
    let pprof = proto::Profile::decode(&bytes[..]).context("decoding the pprof")?;
    let all_labels: Vec<(String, String)> = profile.labels.iter().chain(labels).cloned().collect();
    let resource = otlp::resource(Some(&profile.service), &host_name(), &all_labels);
    let data = otlp::from_pprof(&pprof, resource);
    Ok(ExportProfilesServiceRequest {
        resource_profiles: data.resource_profiles,
        dictionary: data.dictionary,
    }
    .encode_to_vec())
}

impl Destination for Otlp {
    fn name(&self) -> &'static str {
        "otlp"
    }

    fn deliver(
        &mut self,
        _batch: &Batch,
        profile: &ServiceProfile,
        time_left: Option<Duration>,
    ) -> Delivery {
        let body = match request(profile, &self.settings.labels) {
            Ok(body) => body,
            Err(error) => {
                return Delivery::Refused {
                    kind: "encoding".to_owned(),
                    detail: format!("{error:#}"),
                }
            }
        };
        let timeout = time_left.map_or(self.timeouts.request, |left| {
            left.min(self.timeouts.request)
        });
        let result = self
            .agent
            .post(&self.settings.url)
            .header("Content-Type", "application/x-protobuf")
            .config()
            .timeout_global(Some(timeout))
            .build()
            .send(&body[..]);
        http::judge(result, &self.settings.url)
    }
}
