//! Checks on untrusted module images before a driver parses them. The CUDA
//! driver reads a cubin or fatbin through a bare pointer, trusting the sizes
//! inside the image; these checks make sure those sizes stay inside the bytes
//! the caller actually handed over.

use core::fmt;

/// ELF magic, as a cubin starts.
const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
/// Fatbin container magic (little endian 0xBA55ED50).
const FATBIN_MAGIC: u32 = 0xBA55_ED50;

/// Why an image was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ImageError {
    /// Neither an ELF cubin nor a fatbin.
    UnknownFormat,
    /// A 32-bit or big-endian ELF: cubins are 64-bit little endian.
    UnsupportedElf,
    /// A header, section table or segment table reaches past the image's end.
    Truncated,
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ImageError::UnknownFormat => "not a cubin (ELF) or fatbin image",
            ImageError::UnsupportedElf => "not a 64-bit little-endian ELF image",
            ImageError::Truncated => "image is truncated: its tables reach past its end",
        })
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from(u16::from_le_bytes(
        b.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// `offset + count * entry` fits inside `len` (no overflow).
fn table_fits(offset: u64, count: u64, entry: u64, len: u64) -> bool {
    count
        .checked_mul(entry)
        .and_then(|size| size.checked_add(offset))
        .is_some_and(|end| end <= len)
}

/// Checks that a cubin (64-bit ELF) or fatbin image is self-consistent:
/// every table and section it declares lies inside `image`.
pub fn check_module_image(image: &[u8]) -> Result<(), ImageError> {
    let len = image.len() as u64;
    if image.get(..4) == Some(&ELF_MAGIC[..]) {
        // e_ident[EI_CLASS] = 2 (64-bit), e_ident[EI_DATA] = 1 (little endian).
        if image.get(4) != Some(&2) || image.get(5) != Some(&1) {
            return Err(ImageError::UnsupportedElf);
        }
        let t = ImageError::Truncated;
        let phoff = u64_at(image, 0x20).ok_or(t)?;
        let shoff = u64_at(image, 0x28).ok_or(t)?;
        let ehsize = u16_at(image, 0x34).ok_or(t)?;
        let (phentsize, phnum) = (u16_at(image, 0x36).ok_or(t)?, u16_at(image, 0x38).ok_or(t)?);
        let (shentsize, shnum) = (u16_at(image, 0x3a).ok_or(t)?, u16_at(image, 0x3c).ok_or(t)?);
        if ehsize > len
            || !table_fits(phoff, phnum, phentsize, len)
            || !table_fits(shoff, shnum, shentsize, len)
        {
            return Err(t);
        }
        // Each section's file extent (SHT_NOBITS = 8 occupies none).
        for i in 0..shnum {
            let at = usize::try_from(shoff + i * shentsize).map_err(|_| t)?;
            let kind = u32_at(image, at + 4).ok_or(t)?;
            let offset = u64_at(image, at + 0x18).ok_or(t)?;
            let size = u64_at(image, at + 0x20).ok_or(t)?;
            if kind != 8 && !table_fits(offset, 1, size, len) {
                return Err(t);
            }
        }
        // Each segment's file extent.
        for i in 0..phnum {
            let at = usize::try_from(phoff + i * phentsize).map_err(|_| t)?;
            let offset = u64_at(image, at + 0x08).ok_or(t)?;
            let filesz = u64_at(image, at + 0x20).ok_or(t)?;
            if !table_fits(offset, 1, filesz, len) {
                return Err(t);
            }
        }
        Ok(())
    } else if u32_at(image, 0) == Some(FATBIN_MAGIC) {
        // struct { u32 magic; u16 version; u16 header_size; u64 fat_size; }
        let t = ImageError::Truncated;
        let header = u16_at(image, 6).ok_or(t)?;
        let body = u64_at(image, 8).ok_or(t)?;
        if header < 16 || !table_fits(header, 1, body, len) {
            return Err(t);
        }
        Ok(())
    } else {
        Err(ImageError::UnknownFormat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn minimal_elf() -> alloc::vec::Vec<u8> {
        let mut e = vec![0u8; 0x40 + 0x40];
        e[..4].copy_from_slice(&ELF_MAGIC);
        e[4] = 2;
        e[5] = 1;
        e[0x28..0x30].copy_from_slice(&0x40u64.to_le_bytes()); // shoff
        e[0x34..0x36].copy_from_slice(&0x40u16.to_le_bytes()); // ehsize
        e[0x3a..0x3c].copy_from_slice(&0x40u16.to_le_bytes()); // shentsize
        e[0x3c..0x3e].copy_from_slice(&1u16.to_le_bytes()); // shnum
        e
    }

    #[test]
    fn accepts_consistent_images() {
        assert_eq!(check_module_image(&minimal_elf()), Ok(()));
        let mut fat = vec![0u8; 32];
        fat[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        fat[6..8].copy_from_slice(&16u16.to_le_bytes());
        fat[8..16].copy_from_slice(&16u64.to_le_bytes());
        assert_eq!(check_module_image(&fat), Ok(()));
    }

    #[test]
    fn refuses_truncated_and_foreign_images() {
        let e = minimal_elf();
        assert_eq!(check_module_image(&e[..0x50]), Err(ImageError::Truncated));
        assert_eq!(check_module_image(&e[..10]), Err(ImageError::Truncated));
        let mut big_section = e.clone();
        // Section 0: offset 0, size huge.
        big_section[0x40 + 0x20..0x40 + 0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        big_section[0x40 + 0x18..0x40 + 0x20].copy_from_slice(&8u64.to_le_bytes());
        assert_eq!(check_module_image(&big_section), Err(ImageError::Truncated));
        let mut many = e.clone();
        many[0x3c..0x3e].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(check_module_image(&many), Err(ImageError::Truncated));
        let mut elf32 = e;
        elf32[4] = 1;
        assert_eq!(check_module_image(&elf32), Err(ImageError::UnsupportedElf));
        assert_eq!(
            check_module_image(b"// PTX text"),
            Err(ImageError::UnknownFormat)
        );
        assert_eq!(check_module_image(&[]), Err(ImageError::UnknownFormat));
        let mut fat = vec![0u8; 32];
        fat[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        fat[6..8].copy_from_slice(&16u16.to_le_bytes());
        fat[8..16].copy_from_slice(&17u64.to_le_bytes());
        assert_eq!(check_module_image(&fat), Err(ImageError::Truncated));
    }
}
