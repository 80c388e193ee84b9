// Building the page from data: text only ever goes through textContent, so a
// name from a topology file can never become markup.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "title") node.title = value;
    else if (key === "colspan") node.colSpan = value;
    else node.dataset[key] = value;
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child ?? "")));
  }
  return node;
}

export function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

export function setText(id, text) {
  const node = document.getElementById(id);
  if (node.textContent !== text) node.textContent = text;
}
