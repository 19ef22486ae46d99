//! The metadata event: every type the recording's events and constant
//! pools use, with their fields, named as the JDK names them so that JDK
//! tools and Mission Control know them.
//!
//! The event's body is a string table, then a tree of elements, each its
//! name, its attributes (pairs of string indexes) and its children: a
//! `root` holding `metadata` (one `class` per type, with its `field`s and
//! `annotation`s) and `region` (locale and time zone).

use std::collections::HashMap;

use super::encode::Buffer;

/// The type id of the metadata event itself.
pub(super) const METADATA_EVENT: u64 = 0;

/// The ids of the types the metadata declares; an event type's id is its
/// events' type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TypeId {
    Boolean = 20,
    Int,
    Long,
    String,
    Class,
    Thread,
    StackTrace,
    StackFrame,
    Method,
    Symbol,
    FrameType,
    ThreadState,
    Label,
    Category,
    ContentType,
    Timestamp,
    Timespan,
    DataAmount,
    ExecutionSample,
    AllocationSample,
    MonitorEnter,
    OffCpu,
}

impl TypeId {
    pub(super) fn id(self) -> u64 {
        self as u64
    }
}

/// How a field is stored and what its number means.
#[derive(Clone, Copy)]
enum Kind {
    /// Written in the event or pool entry.
    Inline,
    /// A key into the field type's constant pool.
    Pool,
    /// A count, then that many values written out.
    Array,
    /// A time in ticks since the chunk's start ticks.
    Ticks,
    /// A span of time in ticks.
    Span,
    /// A number of bytes.
    Bytes,
}

struct Field(&'static str, TypeId, Kind, &'static str);

struct Declared {
    name: &'static str,
    id: TypeId,
    label: &'static str,
    /// Simple types stand for their single field.
    simple: bool,
    fields: &'static [Field],
}

use Kind::*;
use TypeId::*;

const TYPES: &[Declared] = &[
    primitive("boolean", Boolean),
    primitive("int", Int),
    primitive("long", Long),
    primitive("java.lang.String", String),
    Declared {
        name: "java.lang.Class",
        id: Class,
        label: "Java Class",
        simple: false,
        fields: &[
            Field("name", Symbol, Pool, "Name"),
            Field("modifiers", Int, Inline, "Access Modifiers"),
        ],
    },
    Declared {
        name: "java.lang.Thread",
        id: Thread,
        label: "Thread",
        simple: false,
        fields: &[
            Field("osName", String, Inline, "OS Thread Name"),
            Field("osThreadId", Long, Inline, "OS Thread Id"),
            Field("javaName", String, Inline, "Java Thread Name"),
            Field("javaThreadId", Long, Inline, "Java Thread Id"),
        ],
    },
    Declared {
        name: "jdk.types.StackTrace",
        id: StackTrace,
        label: "Stacktrace",
        simple: false,
        fields: &[
            Field("truncated", Boolean, Inline, "Truncated"),
            Field("frames", StackFrame, Array, "Stack Frames"),
        ],
    },
    Declared {
        name: "jdk.types.StackFrame",
        id: StackFrame,
        label: "Stack Frame",
        simple: false,
        fields: &[
            Field("method", Method, Pool, "Java Method"),
            Field("lineNumber", Int, Inline, "Line Number"),
            Field("bytecodeIndex", Int, Inline, "Bytecode Index"),
            Field("type", FrameType, Pool, "Frame Type"),
        ],
    },
    Declared {
        name: "jdk.types.Method",
        id: Method,
        label: "Java Method",
        simple: false,
        fields: &[
            Field("type", Class, Pool, "Type"),
            Field("name", Symbol, Pool, "Name"),
            Field("descriptor", Symbol, Pool, "Descriptor"),
            Field("modifiers", Int, Inline, "Access Modifiers"),
            Field("hidden", Boolean, Inline, "Hidden"),
        ],
    },
    Declared {
        name: "jdk.types.Symbol",
        id: Symbol,
        label: "Symbol",
        simple: true,
        fields: &[Field("string", String, Inline, "String")],
    },
    Declared {
        name: "jdk.types.FrameType",
        id: FrameType,
        label: "Frame type",
        simple: true,
        fields: &[Field("description", String, Inline, "Description")],
    },
    Declared {
        name: "jdk.types.ThreadState",
        id: ThreadState,
        label: "Java Thread State",
        simple: true,
        fields: &[Field("name", String, Inline, "Name")],
    },
    annotation("jdk.jfr.Label", Label, Inline),
    annotation("jdk.jfr.Category", Category, Array),
    primitive("jdk.jfr.ContentType", ContentType),
    annotation("jdk.jfr.Timestamp", Timestamp, Inline),
    annotation("jdk.jfr.Timespan", Timespan, Inline),
    annotation("jdk.jfr.DataAmount", DataAmount, Inline),
];

/// The event types, one of which a recording holds.
const EVENTS: &[(Declared, &[&str])] = &[
    (
        Declared {
            name: "jdk.ExecutionSample",
            id: ExecutionSample,
            label: "Method Profiling Sample",
            simple: false,
            fields: &[
                Field("startTime", Long, Ticks, "Start Time"),
                Field("sampledThread", Thread, Pool, "Thread"),
                Field("stackTrace", StackTrace, Pool, "Stack Trace"),
                Field("state", ThreadState, Pool, "Thread State"),
            ],
        },
        &["Java Virtual Machine", "Profiling"],
    ),
    (
        Declared {
            name: "jdk.ObjectAllocationSample",
            id: AllocationSample,
            label: "Object Allocation Sample",
            simple: false,
            fields: &[
                Field("startTime", Long, Ticks, "Start Time"),
                Field("eventThread", Thread, Pool, "Event Thread"),
                Field("stackTrace", StackTrace, Pool, "Stack Trace"),
                Field("objectClass", Class, Pool, "Object Class"),
                Field("weight", Long, Bytes, "Sample Weight"),
            ],
        },
        &["Java Application"],
    ),
    (
        Declared {
            name: "jdk.JavaMonitorEnter",
            id: MonitorEnter,
            label: "Java Monitor Blocked",
            simple: false,
            fields: &[
                Field("startTime", Long, Ticks, "Start Time"),
                Field("duration", Long, Span, "Duration"),
                Field("eventThread", Thread, Pool, "Event Thread"),
                Field("stackTrace", StackTrace, Pool, "Stack Trace"),
                Field("monitorClass", Class, Pool, "Monitor Class"),
            ],
        },
        &["Java Application"],
    ),
    (
        Declared {
            name: "stoke.OffCPU",
            id: OffCpu,
            label: "Off-CPU Wait",
            simple: false,
            fields: &[
                Field("startTime", Long, Ticks, "Start Time"),
                Field("duration", Long, Span, "Duration"),
                Field("eventThread", Thread, Pool, "Event Thread"),
                Field("stackTrace", StackTrace, Pool, "Stack Trace"),
            ],
        },
        &["Operating System", "Stoke"],
    ),
];

/// A type without fields: a primitive, or an annotation that marks.
const fn primitive(name: &'static str, id: TypeId) -> Declared {
    Declared {
        name,
        id,
        label: "",
        simple: false,
        fields: &[],
    }
}

const fn annotation(name: &'static str, id: TypeId, kind: Kind) -> Declared {
    Declared {
        name,
        id,
        label: "",
        simple: false,
        fields: match kind {
            Array => &[Field("value", String, Array, "")],
            _ => &[Field("value", String, Inline, "")],
        },
    }
}

/// One element of the tree.
struct Element {
    name: &'static str,
    attributes: Vec<(std::string::String, std::string::String)>,
    children: Vec<Element>,
}

impl Element {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            attributes: Vec::new(),
            children: Vec::new(),
        }
    }

    fn with(mut self, key: impl ToString, value: impl ToString) -> Self {
        self.attributes.push((key.to_string(), value.to_string()));
        self
    }

    fn child(mut self, child: Element) -> Self {
        self.children.push(child);
        self
    }
}

/// An annotation of `class` with `values`: one is `value`, several are
/// `value-0`, `value-1`...
fn annotate(class: TypeId, values: &[&str]) -> Element {
    let element = Element::new("annotation").with("class", class.id());
    match values {
        [value] if class != Category => element.with("value", value),
        values => values
            .iter()
            .enumerate()
            .fold(element, |element, (index, value)| {
                element.with(format!("value-{index}"), value)
            }),
    }
}

fn class_element(class: &Declared, event: Option<&[&str]>) -> Element {
    let mut element = Element::new("class")
        .with("name", class.name)
        .with("id", class.id.id());
    if event.is_some() {
        element = element.with("superType", "jdk.jfr.Event");
    }
    if class.simple {
        element = element.with("simpleType", "true");
    }
    // Annotations that say how to show a number are content types.
    if matches!(class.id, Timestamp | Timespan | DataAmount) {
        element = element.child(annotate(ContentType, &[]));
    }
    if !class.label.is_empty() {
        element = element.child(annotate(Label, &[class.label]));
    }
    if let Some(category) = event {
        element = element.child(annotate(Category, category));
    }
    for &Field(name, type_id, kind, label) in class.fields {
        let mut field = Element::new("field")
            .with("name", name)
            .with("class", type_id.id());
        match kind {
            Inline => {}
            Pool => field = field.with("constantPool", "true"),
            Array => field = field.with("dimension", 1),
            Ticks => field = field.child(annotate(Timestamp, &["TICKS"])),
            Span => field = field.child(annotate(Timespan, &["TICKS"])),
            Bytes => field = field.child(annotate(DataAmount, &["BYTES"])),
        }
        if !label.is_empty() {
            field = field.child(annotate(Label, &[label]));
        }
        element = element.child(field);
    }
    element
}

/// The body (type and fields) of the metadata event of a recording of
/// `event` events.
pub(super) fn body(event: TypeId) -> Vec<u8> {
    let mut metadata = Element::new("metadata");
    for class in TYPES {
        metadata = metadata.child(class_element(class, None));
    }
    for (class, category) in EVENTS.iter().filter(|(class, _)| class.id == event) {
        metadata = metadata.child(class_element(class, Some(category)));
    }
    let region = Element::new("region")
        .with("locale", "en_US")
        .with("gmtOffset", 0);
    let root = Element::new("root").child(metadata).child(region);

    let mut strings = Strings::default();
    let mut tree = Buffer::default();
    encode(&root, &mut strings, &mut tree);
    let mut body = Buffer::default();
    // Type, start time, duration, metadata id.
    body.varint(METADATA_EVENT).varint(0).varint(0).varint(1);
    body.varint(strings.list.len() as u64);
    for string in &strings.list {
        body.string(string);
    }
    body.bytes.extend_from_slice(&tree.bytes);
    body.bytes
}

#[derive(Default)]
struct Strings {
    list: Vec<std::string::String>,
    index: HashMap<std::string::String, u64>,
}

impl Strings {
    fn of(&mut self, text: &str) -> u64 {
        if let Some(&index) = self.index.get(text) {
            return index;
        }
        let index = self.list.len() as u64;
        self.list.push(text.to_owned());
        self.index.insert(text.to_owned(), index);
        index
    }
}

fn encode(element: &Element, strings: &mut Strings, out: &mut Buffer) {
    out.varint(strings.of(element.name));
    out.varint(element.attributes.len() as u64);
    for (key, value) in &element.attributes {
        out.varint(strings.of(key));
        out.varint(strings.of(value));
    }
    out.varint(element.children.len() as u64);
    for child in &element.children {
        encode(child, strings, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_type_is_declared() {
        let declared: Vec<TypeId> = TYPES.iter().map(|class| class.id).collect();
        for class in TYPES.iter().chain(EVENTS.iter().map(|(class, _)| class)) {
            for Field(name, type_id, ..) in class.fields {
                assert!(declared.contains(type_id), "{}.{name}", class.name);
            }
        }
    }

    #[test]
    fn metadata_declares_only_the_recorded_event() {
        let body = body(ExecutionSample);
        let text = std::string::String::from_utf8_lossy(&body);
        assert!(text.contains("jdk.ExecutionSample") && text.contains("jdk.types.StackTrace"));
        assert!(!text.contains("jdk.JavaMonitorEnter"));
        assert_eq!(body[0], METADATA_EVENT as u8);
    }
}
