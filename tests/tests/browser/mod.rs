//! A headless Chromium driven over WebDriver (Debian's `chromium` and
//! `chromium-driver`, which `cargo xtask setup` installs), with the network
//! off: pages are loaded from `file://` and must need nothing else.

// Each test file that includes this module uses only part of it.
#![allow(dead_code)]

use std::{
    ffi::OsStr,
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use fantoccini::{key::Key, Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};
use stoke_tests::{workspace_root, Stoke};
use tokio::runtime::Runtime;

/// The window size pages are drawn at.
pub const WIDTH: u32 = 1400;
const HEIGHT: u32 = 900;

/// A browser session; closed, with its driver stopped, when dropped.
pub struct Browser {
    runtime: Runtime,
    client: Option<Client>,
    driver: Child,
}

/// A screenshot, decoded: rows of `width` pixels of `channels` bytes (RGB
/// or RGBA).
pub struct Screenshot {
    width: u32,
    channels: u32,
    pixels: Vec<u8>,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session
    /// whose every network request fails.
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver (cargo xtask setup installs chromium-driver)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on {port}"
            );
            thread::sleep(Duration::from_millis(50));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let mut browser = Self {
            runtime,
            client: None,
            driver,
        };
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    // No network: a page that fetches anything breaks.
                    "--proxy-server=127.0.0.1:9",
                    "--host-resolver-rules=MAP * ~NOTFOUND",
                    format!("--window-size={WIDTH},{HEIGHT}"),
                ],
            }
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let client = browser
            .runtime
            .block_on(
                ClientBuilder::new(HttpConnector::new())
                    .capabilities(capabilities)
                    .connect(&format!("http://127.0.0.1:{port}")),
            )
            .expect("a Chromium session");
        browser.client = Some(client);
        browser
    }

    fn client(&self) -> Client {
        self.client.clone().expect("the session is open")
    }

    /// Loads `file` with `fragment` (after `#`, may be empty) and waits for
    /// the page's first draw.
    pub fn open(&self, file: &Path, fragment: &str) {
        let url = format!("file://{}#{fragment}", file.display());
        self.goto(&url);
    }

    /// Loads `url` and waits for the flame graph's first draw.
    pub fn goto(&self, url: &str) {
        self.load(url, "window.stoke !== undefined");
    }

    /// Loads `url` and waits until the JS expression `ready` is true.
    pub fn load(&self, url: &str, ready: &str) {
        let client = self.client();
        // about:blank first, so that a URL differing only in its fragment
        // loads the page again.
        self.runtime
            .block_on(async {
                client.goto("about:blank").await?;
                client.goto(url).await
            })
            .unwrap_or_else(|e| panic!("loading {url}: {e}"));
        self.wait_for(ready, Duration::from_secs(30));
    }

    /// Makes what follows (scripts, typing, clicks) act in the frame the
    /// CSS `selector` finds, until [`Browser::leave_frame`].
    pub fn enter_frame(&self, selector: &str) {
        let client = self.client();
        self.runtime
            .block_on(async {
                client
                    .find(Locator::Css(selector))
                    .await?
                    .enter_frame()
                    .await
            })
            .unwrap_or_else(|e| panic!("entering the frame {selector}: {e}"));
    }

    /// Back from a frame [`Browser::enter_frame`] went into to its page.
    pub fn leave_frame(&self) {
        let client = self.client();
        self.runtime
            .block_on(client.enter_parent_frame())
            .unwrap_or_else(|e| panic!("leaving a frame: {e}"));
    }

    /// Runs `script` (a function body: `return ...`) in the page.
    pub fn js(&self, script: &str) -> Value {
        let client = self.client();
        self.runtime
            .block_on(client.execute(script, Vec::new()))
            .unwrap_or_else(|e| panic!("running {script}: {e}"))
    }

    /// Waits until the JS expression `condition` is true.
    pub fn wait_for(&self, condition: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let script = format!("return Boolean({condition});");
        while self.js(&script) != Value::Bool(true) {
            assert!(
                Instant::now() < deadline,
                "the page never got to `{condition}` in {timeout:?}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Replaces the text of the input with id `id` by `text` as a person
    /// would (End, Backspaces, typing), and waits for the page to redraw.
    pub fn type_into(&self, id: &str, text: &str) {
        let renders = self.js("return stoke.renders();");
        let length = self.js(&format!(
            "return document.getElementById({id:?}).value.length;"
        ));
        let keys = format!(
            "{}{}{text}",
            char::from(Key::End),
            char::from(Key::Backspace)
                .to_string()
                .repeat(length.as_u64().unwrap() as usize),
        );
        let client = self.client();
        self.runtime
            .block_on(async { client.find(Locator::Id(id)).await?.send_keys(&keys).await })
            .unwrap_or_else(|e| panic!("typing into #{id}: {e}"));
        self.wait_redraw(&renders);
    }

    /// Clicks the element with id `id` and waits for the page to redraw.
    pub fn click(&self, id: &str) {
        let renders = self.js("return stoke.renders();");
        let client = self.client();
        self.runtime
            .block_on(async { client.find(Locator::Id(id)).await?.click().await })
            .unwrap_or_else(|e| panic!("clicking #{id}: {e}"));
        self.wait_redraw(&renders);
    }

    fn wait_redraw(&self, renders: &Value) {
        // The page redraws once typing pauses (150 ms); the keys of one
        // send arrive well within that, and 300 ms more let a late
        // redraw land before the test reads the page.
        self.wait_for(
            &format!("stoke.renders() > {renders}"),
            Duration::from_secs(20),
        );
        thread::sleep(Duration::from_millis(300));
    }

    /// The page's URL now.
    pub fn url(&self) -> String {
        let client = self.client();
        self.runtime
            .block_on(client.current_url())
            .expect("the current URL")
            .to_string()
    }

    /// Takes a screenshot, saves it as target/html-test/`name` for a person
    /// to look at, and returns it decoded.
    pub fn screenshot(&self, name: &str) -> Screenshot {
        let path = workspace_root().join("target/html-test").join(name);
        let client = self.client();
        let png = self
            .runtime
            .block_on(client.screenshot())
            .expect("a screenshot");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &png).unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(png))
            .read_info()
            .expect("a PNG screenshot");
        let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut pixels).expect("a PNG frame");
        pixels.truncate(info.buffer_size());
        let channels = match info.color_type {
            png::ColorType::Rgba => 4,
            png::ColorType::Rgb => 3,
            other => panic!("a screenshot in {other:?}, not RGB"),
        };
        Screenshot {
            width: info.width,
            channels,
            pixels,
        }
    }
}

impl Screenshot {
    /// The share of pixels in the CSS-pixel box `(x, y, width, height)`
    /// that are not the white background.
    pub fn coloured_share(&self, x: u32, y: u32, width: u32, height: u32) -> f64 {
        let rows = self.pixels.len() as u32 / self.channels / self.width;
        let mut coloured = 0u64;
        let mut all = 0u64;
        for row in y..(y + height).min(rows) {
            for column in x..(x + width).min(self.width) {
                let at = ((row * self.width + column) * self.channels) as usize;
                all += 1;
                if self.pixels[at..at + 3].iter().any(|&channel| channel < 240) {
                    coloured += 1;
                }
            }
        }
        coloured as f64 / all.max(1) as f64
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(client.close());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `value` (from the page) as a number.
pub fn number(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("{value} is not a number"))
}

/// `stoke convert IN -o OUT`, which must succeed.
pub fn convert(input: &Path, output: &Path) {
    let args: [&OsStr; 4] = [
        "convert".as_ref(),
        input.as_ref(),
        "-o".as_ref(),
        output.as_ref(),
    ];
    Stoke::spawn(&args)
        .wait(Duration::from_secs(120))
        .assert_success();
}
