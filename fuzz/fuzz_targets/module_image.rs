//! Untrusted cubin/fatbin images: `check_module_image` never panics, and an
//! image it accepts never declares a table, section or segment that reaches
//! past its end (checked here independently, with u128 arithmetic).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorwasm_core::image::check_module_image;

fn read(b: &[u8], at: u128, n: usize) -> Option<u128> {
    let at = usize::try_from(at).ok()?;
    let s = b.get(at..at.checked_add(n)?)?;
    let mut v = 0u128;
    for (i, x) in s.iter().enumerate() {
        v |= u128::from(*x) << (8 * i);
    }
    Some(v)
}

fuzz_target!(|image: &[u8]| {
    if check_module_image(image).is_err() {
        return;
    }
    let len = image.len() as u128;
    if image.starts_with(b"\x7fELF") {
        let phoff = read(image, 0x20, 8).unwrap();
        let shoff = read(image, 0x28, 8).unwrap();
        let (phentsize, phnum) = (read(image, 0x36, 2).unwrap(), read(image, 0x38, 2).unwrap());
        let (shentsize, shnum) = (read(image, 0x3a, 2).unwrap(), read(image, 0x3c, 2).unwrap());
        assert!(phoff + phnum * phentsize <= len, "program headers past the end");
        assert!(shoff + shnum * shentsize <= len, "section headers past the end");
        for i in 0..shnum {
            let at = shoff + i * shentsize;
            let kind = read(image, at + 4, 4).unwrap();
            let offset = read(image, at + 0x18, 8).unwrap();
            let size = read(image, at + 0x20, 8).unwrap();
            assert!(kind == 8 || offset + size <= len, "section {i} past the end");
        }
        for i in 0..phnum {
            let at = phoff + i * phentsize;
            let offset = read(image, at + 0x08, 8).unwrap();
            let filesz = read(image, at + 0x20, 8).unwrap();
            assert!(offset + filesz <= len, "segment {i} past the end");
        }
    } else {
        let header = read(image, 6, 2).unwrap();
        let body = read(image, 8, 8).unwrap();
        assert!(header + body <= len, "fatbin past the end");
    }
});
