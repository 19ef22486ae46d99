use super::*;
use crate::write::tests::profile;

/// A JFR integer at `at`, and where the next value starts.
fn varint(bytes: &[u8], mut at: usize) -> (u64, usize) {
    let mut value = 0;
    for shift in (0..56).step_by(7) {
        let byte = bytes[at];
        at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return (value, at);
        }
    }
    (value | u64::from(bytes[at]) << 56, at + 1)
}

fn header_field(bytes: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// The type of every event of `bytes`, walked by size from the header to
/// the chunk's end, with where each starts.
fn events(bytes: &[u8]) -> Vec<(u64, usize)> {
    let mut at = HEADER_SIZE;
    let mut events = Vec::new();
    while at < bytes.len() {
        let (size, next) = varint(bytes, at);
        let (type_id, _) = varint(bytes, next);
        events.push((type_id, at));
        assert!(size > 0);
        at += size as usize;
    }
    assert_eq!(at, bytes.len(), "the last event ends the chunk");
    events
}

fn jfr(profile: &Profile) -> Vec<u8> {
    let mut out = Vec::new();
    write(profile, &mut out).unwrap();
    out
}

#[test]
fn chunk_header_points_at_checkpoint_and_metadata() {
    let mut profile = profile(&[("app [1];main;hot", 7), ("app [1];main;cold", 3)]);
    profile.summary.duration = Duration::from_secs(2);
    profile.summary.started = Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let bytes = jfr(&profile);
    assert_eq!(&bytes[..8], b"FLR\0\0\x02\0\0");
    assert_eq!(header_field(&bytes, 8), bytes.len() as u64);
    assert_eq!(header_field(&bytes, 32), 1_700_000_000 * TICKS_PER_SECOND);
    assert_eq!(header_field(&bytes, 40), 2 * TICKS_PER_SECOND);
    assert_eq!(header_field(&bytes, 56), TICKS_PER_SECOND);
    assert_eq!(&bytes[64..68], [0, 0, 0, FLAGS]);
    let events = events(&bytes);
    let checkpoint = header_field(&bytes, 16) as usize;
    let metadata = header_field(&bytes, 24) as usize;
    assert!(events.contains(&(1, checkpoint)));
    assert!(events.contains(&(metadata::METADATA_EVENT, metadata)));
    let samples = events
        .iter()
        .filter(|&&(type_id, _)| type_id == TypeId::ExecutionSample.id())
        .count();
    assert_eq!(samples, 10, "one event per sample");
}

#[test]
fn samples_are_spread_over_the_recording_in_time_order() {
    let times: Vec<(u64, usize)> = timeline(&[3, 1], 400);
    assert_eq!(times, [(50, 0), (150, 0), (250, 1), (350, 0)]);
    let weighed = timeline(&[1, 1, 1, 1], 400);
    assert_eq!(weighed, [(50, 0), (150, 1), (250, 2), (350, 3)]);
}

#[test]
fn too_many_samples_are_scaled_down_alike() {
    let mut pools = Pools::default();
    let profile = profile(&[("app [1];a", 3 * MAX_EVENTS), ("app [1];b", MAX_EVENTS)]);
    let stacks: Vec<Stack> = profile
        .stacks
        .iter()
        .map(|stack| Stack::new(stack, Event::Cpu, &mut pools))
        .collect();
    assert_eq!(
        event_counts(&profile, &stacks),
        [MAX_EVENTS * 3 / 4, MAX_EVENTS / 4]
    );
}

#[test]
fn wall_clock_stacks_are_one_sample_per_period() {
    let mut pools = Pools::default();
    // 100 Hz: a 10 ms period; 25 ms round to 3 samples, 4 ms to none.
    let mut profile = profile(&[("app [1];a", 70_000_000), ("app [1];b", 25_000_000)]);
    profile.event = Event::Wall;
    profile.summary.frequency_hz = 100;
    let mut counts = |profile: &Profile| {
        let stacks: Vec<Stack> = profile
            .stacks
            .iter()
            .map(|stack| Stack::new(stack, Event::Wall, &mut pools))
            .collect();
        event_counts(profile, &stacks)
    };
    assert_eq!(counts(&profile), [7, 3]);
    profile.stacks[1].samples = 4_000_000;
    assert_eq!(counts(&profile), [7, 0]);
}

#[test]
fn weighed_events_carry_their_class_and_value() {
    let mut profile = profile(&[("java [9];Main.run_[j];byte[]", 4096)]);
    profile.event = Event::Alloc;
    let bytes = jfr(&profile);
    let events = events(&bytes);
    let &(_, at) = events
        .iter()
        .find(|&&(type_id, _)| type_id == TypeId::AllocationSample.id())
        .unwrap();
    // Size, type, time, thread, stack trace, class, then the weight.
    let mut next = at;
    let mut fields = Vec::new();
    for _ in 0..7 {
        let (value, after) = varint(&bytes, next);
        fields.push(value);
        next = after;
    }
    assert_eq!(fields[6], 4096);
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("byte[]") && text.contains("Main") && text.contains("run"));
    assert!(!text.contains("_[j]"), "frame kinds are frame types");
}

#[test]
fn empty_profile_is_a_valid_chunk() {
    let bytes = jfr(&profile(&[]));
    let events = events(&bytes);
    assert_eq!(events.len(), 2, "a checkpoint and the metadata: {events:?}");
}
