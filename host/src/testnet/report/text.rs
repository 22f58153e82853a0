//! Text on the timeline PNG without system fonts: font8x8's 8×8 bitmap glyphs (public domain,
//! compiled in), drawn pixel by pixel at an integer scale. Plotters' own text needs a font
//! file from the system, which a server rarely has.

use font8x8::{BASIC_FONTS, UnicodeFonts};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Pixels of one glyph cell at scale 1 (square).
const CELL: i32 = 8;

/// Pixel width of `text` at `scale`.
pub fn width(text: &str, scale: i32) -> i32 {
    i32::try_from(text.chars().count())
        .unwrap_or(i32::MAX)
        .saturating_mul(CELL)
        .saturating_mul(scale)
}

/// Pixel height of a line of text at `scale`.
pub fn height(scale: i32) -> i32 {
    CELL.saturating_mul(scale)
}

/// Draws `text` with its top-left corner at `(x, y)` of `area`, each font pixel a
/// `scale`×`scale` square; a character the font lacks is drawn as `?`.
pub fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    text: &str,
    scale: i32,
    colour: &RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let scale = scale.max(1);
    let mut left = x;
    for c in text.chars() {
        let glyph = BASIC_FONTS
            .get(c)
            .or_else(|| BASIC_FONTS.get('?'))
            .unwrap_or([0; 8]);
        for (row, bits) in (0i32..).zip(glyph) {
            for col in 0..8u8 {
                // The lowest bit is the leftmost pixel.
                if bits & (1u8 << col) == 0 {
                    continue;
                }
                let px = left.saturating_add(i32::from(col).saturating_mul(scale));
                let py = y.saturating_add(row.saturating_mul(scale));
                for dy in 0..scale {
                    for dx in 0..scale {
                        area.draw_pixel((px.saturating_add(dx), py.saturating_add(dy)), colour)?;
                    }
                }
            }
        }
        left = left.saturating_add(CELL.saturating_mul(scale));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glyph_lands_where_asked_at_its_scale() {
        let (w, h) = (40u32, 20u32);
        let mut buf = vec![255u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            draw(&root, (4, 2), "I1", 2, &BLACK).unwrap();
            root.present().unwrap();
        }
        let dark = |x: u32, y: u32| buf[((y * w + x) * 3) as usize] == 0;
        let inked: Vec<(u32, u32)> = (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .filter(|&(x, y)| dark(x, y))
            .collect();
        assert!(!inked.is_empty());
        // Both glyphs stay inside their cells: x 4..36, y 2..18.
        assert!(
            inked
                .iter()
                .all(|&(x, y)| (4..36).contains(&x) && (2..18).contains(&y))
        );
        // Scale 2: font pixels are whole 2×2 squares at even offsets from (4, 2).
        assert!(inked.iter().all(|&(x, y)| dark(x ^ 1, y) && dark(x, y ^ 1)));
        assert_eq!(width("I1", 2), 32);
        assert_eq!(height(2), 16);
    }
}
