//! Charts drawn on the server as SVG with `plotters` (its SVG backend only: no fonts, no
//! bitmaps, no JavaScript), embedded in the page. Labels are this module's own text
//! (category names, decision names, dates), never stored text.

use plotters::prelude::*;
use time::{Date, Duration, OffsetDateTime};

const WIDTH: u32 = 560;
const HEIGHT: u32 = 260;
const BLUE: RGBColor = RGBColor(47, 91, 211);
const ORANGE: RGBColor = RGBColor(214, 120, 32);

/// A bar chart of named counts; `None` when there is nothing to draw. The caption is the
/// page's (a `figcaption`).
pub fn bars(items: &[(String, u64)]) -> Option<String> {
    if items.is_empty() || items.iter().all(|i| i.1 == 0) {
        return None;
    }
    let top = items.iter().map(|i| i.1).max().unwrap_or(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let n = items.len() as f64;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(28)
            .y_label_area_size(44)
            .build_cartesian_2d(-0.5..n - 0.5, 0..top + top / 8 + 1)
            .ok()?;
        // Each bar is centred on its index; only whole key points get a name.
        let name = |x: &f64| {
            let i = x.round();
            if (x - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            items.get(i as usize).map(|i| i.0.clone()).unwrap_or_default()
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(items.len() * 2 + 1)
            .x_label_formatter(&name)
            .draw()
            .ok()?;
        chart
            .draw_series(items.iter().enumerate().map(|(i, (_, v))| {
                let x = i as f64;
                Rectangle::new([(x - 0.35, 0), (x + 0.35, *v)], BLUE.filled())
            }))
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

/// Counts per day (days since the Unix epoch) of several series over the last `days` days,
/// as a line chart; `None` when every series is empty.
pub fn per_day(series: &[(&str, &[(i64, u64)])], days: i64) -> Option<String> {
    if series.iter().all(|s| s.1.is_empty()) {
        return None;
    }
    let today = OffsetDateTime::now_utc().unix_timestamp().div_euclid(86_400);
    let first = today - days + 1;
    let top = series.iter().flat_map(|s| s.1.iter().map(|p| p.1)).max().unwrap_or(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(28)
            .y_label_area_size(44)
            .build_cartesian_2d(first..today, 0..top + top / 8 + 1)
            .ok()?;
        chart.configure_mesh().x_labels(6).x_label_formatter(&|d| day_label(*d)).draw().ok()?;
        for (i, (name, points)) in series.iter().enumerate() {
            let color = if i == 0 { BLUE } else { ORANGE };
            let width = if i == 0 { 4 } else { 2 };
            // Every day of the range, zero where nothing happened.
            let line =
                (first..=today).map(|d| (d, points.iter().find(|p| p.0 == d).map_or(0, |p| p.1)));
            chart
                .draw_series(LineSeries::new(line, color.stroke_width(width)))
                .ok()?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK.mix(0.2))
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

/// `11-24` for a day number.
fn day_label(day: i64) -> String {
    let epoch = Date::from_calendar_date(1970, time::Month::January, 1).unwrap_or(Date::MIN);
    let d = epoch.checked_add(Duration::days(day)).unwrap_or(epoch);
    format!("{:02}-{:02}", u8::from(d.month()), d.day())
}

#[cfg(test)]
mod tests {
    #[test]
    fn charts_are_svg_with_their_labels() {
        let svg = super::bars(&[("fact".into(), 3), ("event".into(), 1)]).expect("a chart");
        assert!(svg.starts_with("<svg") && svg.contains("fact") && svg.contains("event"));
        assert!(super::bars(&[("fact".into(), 0)]).is_none());
        let today = time::OffsetDateTime::now_utc().unix_timestamp().div_euclid(86_400);
        let svg = super::per_day(&[("memories", &[(today, 4)])], 30).expect("a chart");
        assert!(svg.contains("memories") && svg.contains("<polyline"), "{svg}");
        assert!(super::per_day(&[("memories", &[])], 30).is_none());
    }
}
