//! A real headless Chromium driven over WebDriver (Debian's `chromium` and `chromedriver`,
//! installed by `scripts/browser.sh`; `ENGRAM_CHROMEDRIVER` names the driver, else it is
//! looked up on the PATH) for the web UI's end-to-end tests, and the screenshots they save.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// The two screen sizes every screen is checked and photographed at.
pub const DESKTOP: (u32, u32) = (1280, 800);
pub const PHONE: (u32, u32) = (390, 844);

pub struct Browser {
    pub c: Client,
    driver: Child,
    /// The server's base URL.
    pub base: String,
}

/// A test fixture's location from the environment (tests have no settings file).
#[allow(clippy::disallowed_methods)]
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Browser {
    /// Start chromedriver and a headless Chromium session for the server at `base`.
    pub async fn start(base: &str) -> Browser {
        let driver_bin = env("ENGRAM_CHROMEDRIVER").unwrap_or_else(|| "chromedriver".to_string());
        let port = free_port();
        let mut driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {driver_bin} ({e}); run scripts/browser.sh to install chromium and chromium-driver")
            });
        let caps: serde_json::Map<String, Value> = serde_json::from_value(json!({
            "goog:chromeOptions": {
                "binary": env("ENGRAM_CHROMIUM").unwrap_or_else(|| "/usr/bin/chromium".into()),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-quic",
                    "--disable-default-apps", "--hide-scrollbars",
                    format!("--window-size={},{}", DESKTOP.0, DESKTOP.1),
                ]
            }
        }))
        .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let mut last = String::new();
        for _ in 0..100 {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(c) => return Browser { c, driver, base: base.to_string() },
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = driver.kill();
        panic!("no WebDriver session at {url}: {last}");
    }

    pub async fn goto(&self, path: &str) {
        self.c.goto(&format!("{}{}", self.base, path)).await.expect("goto");
    }

    /// The path (and query) of the page shown.
    pub async fn path(&self) -> String {
        let u = self.c.current_url().await.expect("url");
        let q = u.query().map(|q| format!("?{q}")).unwrap_or_default();
        format!("{}{q}", u.path())
    }

    pub async fn find(&self, css: &str) -> Element {
        self.c.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no element '{css}': {e}"))
    }

    pub async fn all(&self, css: &str) -> Vec<Element> {
        self.c.find_all(Locator::Css(css)).await.expect("find_all")
    }

    /// The visible text of every element matching `css`.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let mut out = vec![];
        for e in self.all(css).await {
            out.push(e.text().await.expect("text"));
        }
        out
    }

    /// The whole visible text of the page.
    pub async fn page_text(&self) -> String {
        self.find("body").await.text().await.expect("text")
    }

    /// Type into the field `css` (after clearing it).
    pub async fn fill(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        e.clear().await.expect("clear");
        e.send_keys(text).await.expect("send_keys");
    }

    /// Choose `value` in the select `css`.
    pub async fn select(&self, css: &str, value: &str) {
        self.find(css).await.select_by_value(value).await.expect("select");
    }

    /// Click a button that submits a form, and wait for the next page to load.
    pub async fn submit(&self, css: &str) {
        self.c.execute("window.__engramOld = true", vec![]).await.expect("js");
        self.click(css).await;
        for _ in 0..200 {
            let v = self
                .c
                .execute("return [window.__engramOld === undefined, document.readyState]", vec![])
                .await;
            if let Ok(v) = v
                && v[0] == Value::Bool(true)
                && v[1] == "complete"
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("clicking '{css}' loaded no new page");
    }

    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.unwrap_or_else(|e| panic!("click '{css}': {e}"));
    }

    /// Resize the window so that the page's viewport is `w` × `h` CSS pixels.
    pub async fn viewport(&self, (w, h): (u32, u32)) {
        self.c.set_window_size(w, h).await.expect("resize");
        let inner = self
            .c
            .execute("return [window.innerWidth, window.innerHeight]", vec![])
            .await
            .expect("js");
        let (iw, ih) =
            (inner[0].as_u64().unwrap_or(0) as u32, inner[1].as_u64().unwrap_or(0) as u32);
        if (iw, ih) != (w, h) {
            self.c.set_window_size(w + (w - iw.min(w)), h + (h - ih.min(h))).await.expect("resize");
        }
    }

    /// Check the page at both sizes (nothing wider than the screen) and save a screenshot of
    /// each under `$ENGRAM_SCREENSHOTS` (default `target/screenshots`) as `<name>-<w>x<h>.png`.
    pub async fn shoot(&self, name: &str) {
        for size in [DESKTOP, PHONE] {
            self.viewport(size).await;
            let wide = self
                .c
                .execute("return [document.documentElement.scrollWidth, window.innerWidth]", vec![])
                .await
                .expect("js");
            let (scroll, inner) = (wide[0].as_u64().unwrap(), wide[1].as_u64().unwrap());
            assert!(
                scroll <= inner,
                "{name} at {}x{}: the page is {scroll} px wide in a {inner} px window (horizontal overflow)",
                size.0,
                size.1
            );
            let png = self.c.screenshot().await.expect("screenshot");
            let dir = screenshots_dir();
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{name}-{}x{}.png", size.0, size.1)), png).unwrap();
        }
        self.viewport(DESKTOP).await;
    }

    /// Is a JavaScript alert open? (An injected script would have opened one.)
    pub async fn alert_open(&self) -> bool {
        self.c.get_alert_text().await.is_ok()
    }

    pub async fn close(mut self) {
        let _ = self.c.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}

fn screenshots_dir() -> PathBuf {
    match env("ENGRAM_SCREENSHOTS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots"),
    }
}
